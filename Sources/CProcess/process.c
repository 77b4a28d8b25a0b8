#define _GNU_SOURCE
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <linux/sockios.h>
#include <unistd.h>

pid_t tc_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd, int stderr_fd,
               int *error_out) {
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
    if (stderr_fd >= 0 && (error = posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO)) != 0) goto cleanup;
    if ((error = posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1)) != 0) goto cleanup;
    // The server ignores some signals and blocks others on its threads; dispositions set to "ignore" survive exec.
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    sigemptyset(&none);
    if ((error = posix_spawnattr_setsigdefault(&attributes, &all)) != 0) goto cleanup;
    if ((error = posix_spawnattr_setsigmask(&attributes, &none)) != 0) goto cleanup;
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID;
    if ((error = posix_spawnattr_setflags(&attributes, flags)) != 0) goto cleanup;
    error = posix_spawn(&pid, path, &actions, &attributes, argv, envp);
    if (error != 0) pid = -1;
cleanup:
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
done:
    if (error_out) *error_out = error;
    return pid;
}

int tc_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int tc_set_io_owner(int fd, pid_t pid, int method) {
    if (method == 0) {
        struct f_owner_ex owner = { .type = F_OWNER_PID, .pid = pid };
        return fcntl(fd, F_SETOWN_EX, &owner);
    }
    if (method == 2) return (int)syscall(SYS_fcntl, fd, 0x100000000UL | F_SETOWN, (long)pid);
    int value = pid;
    return ioctl(fd, FIOSETOWN, &value);
}

int tc_reset_open_files_limit(pid_t pid) {
    struct rlimit current;
    if (prlimit(pid, RLIMIT_NOFILE, NULL, &current) != 0) return -1;
    return prlimit(pid, RLIMIT_NOFILE, &current, NULL);
}

int tc_reset_affinity(pid_t pid) {
    cpu_set_t cpus;
    if (sched_getaffinity(pid, sizeof cpus, &cpus) != 0) return -1;
    return sched_setaffinity(pid, sizeof cpus, &cpus);
}

int tc_unshare_nothing(void) { return unshare(0); }

int tc_try_userfaultfd(void) {
    // UFFD_USER_MODE_ONLY (1): what an unprivileged process may ask for whatever vm.unprivileged_userfaultfd says.
    long descriptor = syscall(SYS_userfaultfd, O_CLOEXEC | 1);
    if (descriptor < 0 && errno == EINVAL) descriptor = syscall(SYS_userfaultfd, O_CLOEXEC);
    if (descriptor < 0) return -1;
    close((int)descriptor);
    return 0;
}

int tc_try_shared_memory_segment(void) {
    int segment = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (segment < 0) return -1;
    shmctl(segment, IPC_RMID, NULL);
    return 0;
}

int tc_try_memfd(void) {
    long descriptor = syscall(SYS_memfd_create, "transcoderd-check", 1); // MFD_CLOEXEC
    if (descriptor < 0) return -1;
    close((int)descriptor);
    return 0;
}

int tc_try_shared_mapping(void) {
    void *mapping = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) return -1;
    munmap(mapping, 4096);
    return 0;
}

int tc_try_keyctl(void) {
    // KEYCTL_GET_KEYRING_ID (0) of KEY_SPEC_SESSION_KEYRING (-3), without creating it (0).
    long result = syscall(SYS_keyctl, 0, -3, 0);
    if (result < 0 && errno == EPERM) return -1;
    return 0;
}

int tc_touch_nothing(const char *path) {
    struct timespec times[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };
    return utimensat(AT_FDCWD, path, times, 0);
}

int tc_remove_attribute(const char *path, const char *name) { return removexattr(path, name); }

int tc_try_fsetxattr(int fd, const char *name) { return fsetxattr(fd, name, "x", 1, XATTR_REPLACE); }

int tc_try_clone(unsigned long flags) {
    return (int)syscall(SYS_clone, flags | CLONE_THREAD, 0, 0, 0, 0);
}

int tc_try_clone3(void) { return (int)syscall(435, 0, 0); }

int tc_try_openat2(const char *path) {
    struct { unsigned long long flags, mode, resolve; } how = { O_RDONLY | O_CLOEXEC, 0, 0 };
    int descriptor = (int)syscall(437, AT_FDCWD, path, &how, sizeof how);
    if (descriptor >= 0) close(descriptor);
    return descriptor >= 0 ? 0 : -1;
}

int tc_try_setxattrat(const char *path, const char *name) {
    struct { unsigned long long value; unsigned int size; unsigned int flags; } arguments = { 0, 0, XATTR_REPLACE };
    return (int)syscall(463, AT_FDCWD, path, 0, name, &arguments, sizeof arguments);
}

int tc_reset_io_priority(int which, pid_t who) {
    long priority = syscall(SYS_ioprio_get, which, who);
    if (priority < 0) return -1;
    return (int)syscall(SYS_ioprio_set, which, who, priority);
}

int tc_drop_capabilities(unsigned long long keep) {
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    // The bounding set first (dropping from it takes CAP_SETPCAP, which goes next); a process without that
    // capability has nothing there to fear, and the kernel's EPERM is ignored. PR_CAPBSET_READ fails past the
    // kernel's last capability.
    for (int capability = 0; capability < 64; capability++) {
        if (prctl(PR_CAPBSET_READ, capability, 0, 0, 0) < 0) break;
        if (!(keep & (1ULL << capability))) prctl(PR_CAPBSET_DROP, capability, 0, 0, 0);
    }
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, data) != 0) return -1;
    for (int index = 0; index < _LINUX_CAPABILITY_U32S_3; index++) {
        unsigned int kept = (unsigned int)(keep >> (32 * index));
        data[index].effective &= kept;
        data[index].permitted &= kept;
        data[index].inheritable = 0;
    }
    return (int)syscall(SYS_capset, &header, data);
}

int tc_set_no_new_privileges(void) { return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); }

int tc_no_new_privileges(void) { return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); }

int tc_set_parent_death_signal(int signal) { return prctl(PR_SET_PDEATHSIG, signal, 0, 0, 0); }

int tc_parent_death_signal(void) {
    int signal = 0;
    if (prctl(PR_GET_PDEATHSIG, &signal, 0, 0, 0) != 0) return 0;
    return signal;
}

int tc_set_dumpable(int value) { return prctl(PR_SET_DUMPABLE, value, 0, 0, 0); }

static volatile sig_atomic_t terminate_requested = 0;
static pthread_t handler_thread;
static pid_t terminate_parent;

static void on_terminate(int signal, siginfo_t *info, void *context) {
    (void)context;
    int saved = errno;
    // Our own forwarding (below) comes from this process; anything else must come from the parent.
    pid_t sender = info ? info->si_pid : 0;
    if (sender == terminate_parent || sender == getpid()) {
        terminate_requested = 1;
        if (!pthread_equal(pthread_self(), handler_thread)) pthread_kill(handler_thread, signal);
    }
    errno = saved;
}

int tc_install_terminate_handler(pid_t parent) {
    handler_thread = pthread_self();
    terminate_parent = parent;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_terminate;
    sigemptyset(&action.sa_mask);
    // No SA_RESTART: a blocking read is interrupted, and FFmpeg then asks its interrupt callback.
    action.sa_flags = SA_SIGINFO;
    return sigaction(SIGTERM, &action, NULL);
}

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

int tc_landlock_abi(void) {
    return (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
}

static int add_rule(int ruleset, const char *path, __u64 access) {
    int descriptor = open(path, O_PATH | O_CLOEXEC);
    // A path that is not there gets no rule, and so cannot be touched: the ruleset holds for the rest. (A missing
    // input fails as such when it is opened; a folder renamed away by a newer claim is not this one's to write.)
    if (descriptor < 0) return errno == ENOENT ? 0 : -1;
    struct stat status;
    if (fstat(descriptor, &status) == 0 && !S_ISDIR(status.st_mode)) {
        // A file takes only the rights a file has.
        access &= LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |
                  LANDLOCK_ACCESS_FS_EXECUTE;
    }
    struct landlock_path_beneath_attr rule = { .allowed_access = access, .parent_fd = descriptor };
    int result = (int)syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    int saved = errno;
    close(descriptor);
    errno = saved;
    return result;
}

int tc_landlock_restrict(const char *const *read_paths, int read_count, const char *const *write_dirs, int write_count) {
    int abi = tc_landlock_abi();
    if (abi < 0) return -1;
    __u64 handled = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
        LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
        LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
        LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
        LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2) handled |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3) handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
    struct landlock_ruleset_attr attributes = { .handled_access_fs = handled };
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attributes, sizeof attributes, 0);
    if (ruleset < 0) return -1;
    int result = 0;
    __u64 read = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
    // A job writes its output as a folder (segments in sub-folders) under a temporary name, then renames it.
    __u64 write = read | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_REMOVE_FILE |
        LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR | (handled & LANDLOCK_ACCESS_FS_TRUNCATE) |
        (handled & LANDLOCK_ACCESS_FS_REFER);
    for (int index = 0; index < read_count && result == 0; index++) result = add_rule(ruleset, read_paths[index], read);
    for (int index = 0; index < write_count && result == 0; index++) result = add_rule(ruleset, write_dirs[index], write);
    if (result == 0) result = (int)syscall(SYS_landlock_restrict_self, ruleset, 0);
    int saved = errno;
    close(ruleset);
    errno = saved;
    return result;
}

int tc_terminate_requested(void) { return terminate_requested; }
