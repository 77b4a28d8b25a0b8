/// Facts about the HTTP service that do not depend on a running server.
public enum ServerInfo {
    /// Port the service listens on unless told otherwise.
    public static let defaultPort = 8080
    /// Address the service listens on unless told otherwise (loopback; 0.0.0.0 in the container).
    public static let defaultHost = "127.0.0.1"
}
