// Linux calls Swift's Glibc module does not bring in (epoll, eventfd, sendfile). struct epoll_event is packed on
// x86_64, so it never crosses into Swift: these helpers take and return its fields as plain values.
#ifndef TRANSCODERD_CSYSTEM_SHIM_H
#define TRANSCODERD_CSYSTEM_SHIM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

static const uint32_t tc_epoll_in = EPOLLIN;
static const uint32_t tc_epoll_out = EPOLLOUT;
static const uint32_t tc_epoll_err = EPOLLERR;
static const uint32_t tc_epoll_hup = EPOLLHUP;
static const uint32_t tc_epoll_rdhup = EPOLLRDHUP;

static inline int tc_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static inline int tc_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &event);
}

static inline int tc_epoll_add(void) { return EPOLL_CTL_ADD; }
static inline int tc_epoll_mod(void) { return EPOLL_CTL_MOD; }
static inline int tc_epoll_del(void) { return EPOLL_CTL_DEL; }

/// Waits like epoll_wait and copies each ready event's data and flags into the two arrays.
static inline int tc_epoll_wait(int epfd, uint64_t *data, uint32_t *events, int max, int timeout) {
    struct epoll_event ready[256];
    if (max > 256) max = 256;
    int count = epoll_wait(epfd, ready, max, timeout);
    for (int i = 0; i < count; i++) {
        data[i] = ready[i].data.u64;
        events[i] = ready[i].events;
    }
    return count;
}

static inline int tc_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

static inline ssize_t tc_sendfile(int out, int in, int64_t *offset, size_t count) {
    off_t position = (off_t)*offset;
    ssize_t sent = sendfile(out, in, &position, count);
    *offset = (int64_t)position;
    return sent;
}

static inline int tc_accept(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

static inline int tc_socket_stream(int family) { return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

static inline int tc_msg_nosignal(void) { return MSG_NOSIGNAL; }

#endif
