#define _GNU_SOURCE
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

extern char **environ;

pid_t tc_spawn(const char *path, char *const argv[], int stdin_fd, int stdout_fd, int *error_out) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    sigset_t all, none;
    pid_t pid = -1;
    int error = posix_spawn_file_actions_init(&actions);
    if (error != 0) goto done;
    error = posix_spawnattr_init(&attributes);
    if (error != 0) {
        posix_spawn_file_actions_destroy(&actions);
        goto done;
    }
    if ((error = posix_spawn_file_actions_adddup2(&actions, stdin_fd, STDIN_FILENO)) != 0) goto cleanup;
    if ((error = posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO)) != 0) goto cleanup;
    if ((error = posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1)) != 0) goto cleanup;
    // The server ignores some signals and blocks others on its threads; dispositions set to "ignore" survive exec.
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    sigemptyset(&none);
    if ((error = posix_spawnattr_setsigdefault(&attributes, &all)) != 0) goto cleanup;
    if ((error = posix_spawnattr_setsigmask(&attributes, &none)) != 0) goto cleanup;
    if ((error = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)) != 0) goto cleanup;
    error = posix_spawn(&pid, path, &actions, &attributes, argv, environ);
    if (error != 0) pid = -1;
cleanup:
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
done:
    if (error_out) *error_out = error;
    return pid;
}

int tc_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int tc_set_no_new_privileges(void) { return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); }

int tc_no_new_privileges(void) { return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); }

int tc_set_parent_death_signal(int signal) { return prctl(PR_SET_PDEATHSIG, signal, 0, 0, 0); }

int tc_parent_death_signal(void) {
    int signal = 0;
    if (prctl(PR_GET_PDEATHSIG, &signal, 0, 0, 0) != 0) return 0;
    return signal;
}

static volatile sig_atomic_t terminate_requested = 0;
static pthread_t handler_thread;

static void on_terminate(int signal) {
    int saved = errno;
    terminate_requested = 1;
    if (!pthread_equal(pthread_self(), handler_thread)) pthread_kill(handler_thread, signal);
    errno = saved;
}

int tc_install_terminate_handler(void) {
    handler_thread = pthread_self();
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_terminate;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0; // no SA_RESTART: a blocking read is interrupted, and FFmpeg then asks its interrupt callback
    return sigaction(SIGTERM, &action, NULL);
}

int tc_terminate_requested(void) { return terminate_requested; }
