// Process control Swift cannot do by itself: posix_spawn with every descriptor but the standard ones closed
// (posix_spawn_file_actions_addclosefrom_np is a GNU extension Swift's Glibc module leaves out), prctl (variadic),
// and a SIGTERM handler that must run as plain C (it only sets a flag and interrupts the main thread).
#ifndef TRANSCODERD_CPROCESS_H
#define TRANSCODERD_CPROCESS_H

#include <sys/types.h>

/// Spawns `path` with `argv` (NULL-terminated) and the current environment. The child's standard input and output
/// are `stdin_fd` and `stdout_fd`, its standard error `stderr_fd` (ours when -1), every other descriptor is closed, every signal is
/// unblocked and has its default action, and it leads a session of its own (a Ctrl-C or a signal to our process
/// group does not reach it). Returns the pid, or -1 with the error number in `*error_out`.
pid_t tc_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd, int stderr_fd,
               int *error_out);

/// pipe2(fds, O_CLOEXEC): 0 or -1 (errno set).
int tc_pipe(int fds[2]);

/// Makes `pid` the owner of `fd`'s I/O signals by `method`: 0 fcntl(F_SETOWN_EX), 1 ioctl(FIOSETOWN), 2 the raw
/// fcntl system call with F_SETOWN and high bits set in the command (the kernel reads its low 32 bits). 0 or -1
/// (errno set). For the sandbox check.
int tc_set_io_owner(int fd, pid_t pid, int method);

/// Sets process `pid`'s limit of open files to what it is (prlimit: read, then set the same): 0 when the set
/// was allowed (nothing changes), -1 (errno set) when refused. For the sandbox check.
int tc_reset_open_files_limit(pid_t pid);

/// Sets process `pid`'s CPUs to what they are (sched_getaffinity, then sched_setaffinity): 0 when the set was
/// allowed, -1 (errno set) when refused. For the sandbox check.
int tc_reset_affinity(pid_t pid);

/// unshare(0), which changes nothing: 0 when allowed, -1 (errno set) when refused. For the sandbox check.
int tc_unshare_nothing(void);

/// userfaultfd(O_CLOEXEC | UFFD_USER_MODE_ONLY), closed at once: 0 when allowed, -1 (errno set) when refused. For
/// the sandbox check.
int tc_try_userfaultfd(void);

/// keyctl(KEYCTL_GET_KEYRING_ID) of the session keyring, not creating it: 0 when allowed (whatever it answered
/// but EPERM), -1 (errno EPERM) when refused. For the sandbox check.
int tc_try_keyctl(void);

/// Memory a process can take outside its data limit (RLIMIT_DATA counts private mappings only), each made and
/// given back at once: a System V shared memory segment (shmget), a memfd (memfd_create), and a shared anonymous
/// mapping (mmap). 0 when allowed, -1 (errno set) when refused. For the sandbox check.
int tc_try_shared_memory_segment(void);
int tc_try_memfd(void);
int tc_try_shared_mapping(void);

/// utimensat of `path` leaving both times as they are (UTIME_OMIT): 0 when allowed, -1 (errno set) when refused.
/// For the sandbox check.
int tc_touch_nothing(const char *path);

/// removexattr of `name` from `path`: 0 when removed, -1 (errno set) otherwise. For the sandbox check.
int tc_remove_attribute(const char *path, const char *name);

/// fsetxattr replacing `name` on the file open as `fd`, which it does not have: -1 with ENODATA when allowed, EPERM
/// when refused. For the sandbox check.
int tc_try_fsetxattr(int fd, const char *name);

/// The raw clone call with `flags` and CLONE_THREAD without CLONE_SIGHAND, which the kernel refuses (EINVAL) before
/// it starts anything: -1 with EINVAL when the filter let it through, EPERM when it refused it. For the sandbox check.
int tc_try_clone(unsigned long flags);

/// clone3 (number 435 everywhere) with no arguments: -1 with EINVAL when the filter let it through, ENOSYS when it
/// refused it. For the sandbox check.
int tc_try_clone3(void);

/// openat2 (number 437 everywhere) of `path` to read, closed again: 0 when allowed, -1 with EPERM when refused.
/// For the sandbox check.
int tc_try_openat2(const char *path);

/// setxattrat (Linux 6.13, number 463 everywhere) replacing `name` on `path`, which it does not have: -1 with
/// ENODATA when allowed (ENOSYS on an older kernel), EPERM when refused. For the sandbox check.
int tc_try_setxattrat(const char *path, const char *name);

/// Sets the I/O priority of `who` (`which`: 1 a process, 2 a process group, 3 a user) to what it is (ioprio_get,
/// then ioprio_set): 0 when the set was allowed, -1 (errno set) when refused. For the sandbox check.
int tc_reset_io_priority(int which, pid_t who);

/// Drops every capability but those whose bits are in `keep` from the bounding, effective and permitted sets, and
/// every one from the ambient and inheritable sets. 0, or -1 (errno set) when the sets could not be changed.
int tc_drop_capabilities(unsigned long long keep);

/// prctl(PR_SET_NO_NEW_PRIVS, 1): 0 or -1 (errno set).
int tc_set_no_new_privileges(void);

/// prctl(PR_GET_NO_NEW_PRIVS): 1 when set.
int tc_no_new_privileges(void);

/// prctl(PR_SET_PDEATHSIG, signal): the signal this process gets when the thread that spawned it ends.
int tc_set_parent_death_signal(int signal);

/// prctl(PR_GET_PDEATHSIG): the signal set, 0 for none.
int tc_parent_death_signal(void);

/// prctl(PR_SET_DUMPABLE, value): 0 keeps processes of the same user (a compromised child) out of this one's
/// /proc files (mem, environ) and from attaching to it.
int tc_set_dumpable(int value);

/// Installs a SIGTERM handler (without SA_RESTART) that records the request when it comes from `parent` (a SIGTERM
/// from anyone else, such as a service manager signalling every process, is ignored) and, when it runs on another
/// thread, sends the signal on to the thread that installed it, so a blocking call there (a read of a slow file)
/// returns EINTR. Call it from the main thread.
int tc_install_terminate_handler(pid_t parent);

/// The Landlock ABI version the kernel offers, or -1 (errno set) when it offers none.
int tc_landlock_abi(void);

/// Confines this process's file access (Landlock): reading the files or trees in `read_paths`, and reading,
/// writing, creating, renaming and removing files beneath the directories in `write_dirs`; nothing else. Needs
/// no new privileges set. 0, or -1 with errno.
int tc_landlock_restrict(const char *const *read_paths, int read_count, const char *const *write_dirs, int write_count);

/// Whether SIGTERM has arrived since `tc_install_terminate_handler`.
int tc_terminate_requested(void);

#endif
