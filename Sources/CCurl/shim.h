// libcurl (Debian's OpenSSL flavour) for outbound HTTP: webhooks and inputs fetched from a URL. curl_easy_setopt and
// curl_easy_getinfo are variadic, which Swift cannot call, so each argument type gets a typed inline wrapper here.
#ifndef TRANSCODERD_CCURL_SHIM_H
#define TRANSCODERD_CCURL_SHIM_H
#include <curl/curl.h>
#include <sys/socket.h>
#include <netinet/in.h>

static inline CURLcode tc_curl_set_long(CURL *curl, CURLoption option, long value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tc_curl_set_offset(CURL *curl, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tc_curl_set_string(CURL *curl, CURLoption option, const char *value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tc_curl_set_pointer(CURL *curl, CURLoption option, void *value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tc_curl_set_write(CURL *curl, size_t (*callback)(char *, size_t, size_t, void *)) {
    return curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, callback);
}
static inline CURLcode tc_curl_set_header(CURL *curl, size_t (*callback)(char *, size_t, size_t, void *)) {
    return curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, callback);
}
static inline CURLcode tc_curl_set_open_socket(CURL *curl,
                                               curl_socket_t (*callback)(void *, curlsocktype, struct curl_sockaddr *)) {
    return curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, callback);
}
static inline CURLcode tc_curl_set_progress(CURL *curl,
                                            int (*callback)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t)) {
    return curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, callback);
}
static inline CURLcode tc_curl_set_prereq(CURL *curl, int (*callback)(void *, char *, char *, int, int)) {
    return curl_easy_setopt(curl, CURLOPT_PREREQFUNCTION, callback);
}
static inline CURLcode tc_curl_get_long(CURL *curl, CURLINFO info, long *value) {
    return curl_easy_getinfo(curl, info, value);
}
static inline CURLcode tc_curl_get_offset(CURL *curl, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(curl, info, value);
}
static inline CURLcode tc_curl_get_string(CURL *curl, CURLINFO info, char **value) {
    return curl_easy_getinfo(curl, info, value);
}
#endif
