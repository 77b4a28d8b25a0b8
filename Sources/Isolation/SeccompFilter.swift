import CSeccomp
import Glibc

/// Owns a libseccomp filter context: built from rules, loaded into this process (and its threads made later), then
/// released. Every call refused by a rule fails with `EPERM`, unless it says otherwise.
final class SeccompFilter {
    private var context: scmp_filter_ctx?

    /// A filter that allows everything but what its rules refuse.
    init() throws(ProcessError) {
        context = seccomp_init(tc_scmp_act_allow())
        guard context != nil else { throw ProcessError(errnoCode: ENOMEM, reason: "seccomp_init") }
    }

    /// Refuses the system call `name` (by `number` when libseccomp does not know the name), or only when its first
    /// argument is not `allowedFirstArgument`.
    func refuse(_ name: String, number fallback: Int32? = nil, unlessFirstArgumentIs allowedFirstArgument: UInt64? = nil,
                error: Int32 = EPERM) throws(ProcessError) {
        guard let number = try Self.number(of: name, fallback: fallback) else { return }
        var comparison = scmp_arg_cmp(arg: 0, op: SCMP_CMP_NE, datum_a: allowedFirstArgument ?? 0, datum_b: 0)
        let result = allowedFirstArgument == nil
            ? seccomp_rule_add_array(context, tc_scmp_act_errno(error), number, 0, nil)
            : seccomp_rule_add_array(context, tc_scmp_act_errno(error), number, 1, &comparison)
        guard result == 0 else { throw ProcessError(errnoCode: -result, reason: "adding a seccomp rule for \(name)") }
    }

    /// Refuses the system call `name` when every condition holds: argument `index` equal (or, with `equal` false,
    /// not equal) to `value`. With `low32`, only the argument's low 32 bits are compared: the kernel reads an
    /// `unsigned int` argument (a `fcntl` or `ioctl` command) from them alone, so a caller setting the high bits
    /// must not slip past a comparison of all 64.
    func refuse(_ name: String, when conditions: [(index: UInt32, equal: Bool, value: UInt64)], low32: Bool = false) throws(ProcessError) {
        guard let number = try Self.number(of: name) else { return }
        var comparisons = conditions.map { condition in
            low32 && condition.equal
                ? scmp_arg_cmp(arg: condition.index, op: SCMP_CMP_MASKED_EQ, datum_a: 0xFFFF_FFFF, datum_b: condition.value)
                : scmp_arg_cmp(arg: condition.index, op: condition.equal ? SCMP_CMP_EQ : SCMP_CMP_NE, datum_a: condition.value, datum_b: 0)
        }
        let result = seccomp_rule_add_array(context, tc_scmp_act_errno(EPERM), number, UInt32(comparisons.count), &comparisons)
        guard result == 0 else { throw ProcessError(errnoCode: -result, reason: "adding a seccomp rule for \(name)") }
    }

    /// Refuses the system call `name` when argument `index`, masked with `mask`, equals `value` (flags).
    func refuse(_ name: String, argument index: UInt32, masked mask: UInt64, equal value: UInt64) throws(ProcessError) {
        guard let number = try Self.number(of: name) else { return }
        var comparison = scmp_arg_cmp(arg: index, op: SCMP_CMP_MASKED_EQ, datum_a: mask, datum_b: value)
        let result = seccomp_rule_add_array(context, tc_scmp_act_errno(EPERM), number, 1, &comparison)
        guard result == 0 else { throw ProcessError(errnoCode: -result, reason: "adding a seccomp rule for \(name)") }
    }

    /// The number of the system call `name` on this architecture; nil for one it does not have (aarch64 has no
    /// `chmod`, only `fchmodat`): nothing to refuse. A name libseccomp does not know is `fallback`, else an error.
    private static func number(of name: String, fallback: Int32? = nil) throws(ProcessError) -> Int32? {
        let number = seccomp_syscall_resolve_name(name)
        if number == __NR_SCMP_ERROR, let fallback { return fallback }
        guard number != __NR_SCMP_ERROR else { throw ProcessError(errnoCode: EINVAL, reason: "resolving the system call \(name)") }
        return number >= 0 ? number : nil
    }

    /// Installs the filter in this process; it cannot be removed.
    func load() throws(ProcessError) {
        let result = seccomp_load(context)
        guard result == 0 else { throw ProcessError(errnoCode: -result, reason: "loading the seccomp filter") }
    }

    deinit { seccomp_release(context) }
}
