// libseccomp from Debian (libseccomp-dev). What Swift cannot import by itself: the action macros.
#ifndef TRANSCODERD_CSECCOMP_SHIM_H
#define TRANSCODERD_CSECCOMP_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <seccomp.h>

/// SCMP_ACT_ERRNO(error): the call fails with `error`.
static inline uint32_t tc_scmp_act_errno(int error) { return SCMP_ACT_ERRNO(error); }
static inline uint32_t tc_scmp_act_allow(void) { return SCMP_ACT_ALLOW; }

#endif
