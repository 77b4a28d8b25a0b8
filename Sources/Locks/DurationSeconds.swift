/// A `Duration` as a number of seconds, for the APIs and fields that take a `Double` (timeouts, metrics, JSON).
extension Duration {
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) * 1e-18
    }
}
