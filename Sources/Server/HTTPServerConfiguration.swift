import Foundation

/// Network settings and limits of the HTTP server; every number has its unit in its name.
public struct HTTPServerConfiguration: Sendable {
    /// Address to listen on (`127.0.0.1`, `0.0.0.0`, `::1`, `::`, or a host name).
    public var host = "127.0.0.1"
    /// TCP port; 0 picks a free one.
    public var port = 8080
    /// Largest header section (431 past it), bytes.
    public var maxHeaderBytes = 16 * 1024
    /// Longest request target (414 past it), bytes.
    public var maxTargetBytes = 8 * 1024
    /// Largest upload (413 past it), bytes.
    public var maxUploadBytes: Int64 = 20 * 1024 * 1024 * 1024
    /// Largest JSON body, bytes.
    public var maxJSONBytes = 1024 * 1024
    /// Bounds on the parts of a multipart body other than `file` (count, bytes each, bytes together).
    var multipartLimits = MultipartSink.Limits()
    /// Request-body bytes held in memory at once over all connections (JSON bodies, multipart parts); past it: 503.
    public var maxBufferedBodyBytes = 64 * 1024 * 1024
    /// Upload bytes waiting in memory for the disk over all uploads, besides one 256 KiB buffer each; past it an
    /// upload is read only as fast as its own writes end.
    public var maxUploadBufferBytes = 64 * 1024 * 1024
    /// Bytes an event stream may have waiting for a client that does not read; past it the stream is closed.
    public var maxStreamBacklogBytes = 1024 * 1024
    /// Time allowed to send a whole header section (slowloris), seconds.
    public var headerTimeout = 10.0
    /// Time an idle keep-alive connection stays open, seconds.
    public var idleTimeout = 60.0
    /// Time a body upload or a response download may stall, seconds.
    public var transferTimeout = 60.0
    /// Seconds between heartbeat comments on an idle event stream.
    public var heartbeatInterval = 15.0
    /// Open connections at most; past it new ones get 503.
    public var maxConnections = 4096
    /// Event loop threads, each with its own listening socket (SO_REUSEPORT); default one per core, at most 4.
    public var eventLoops = Self.defaultEventLoops
    /// One event loop a core, four at most.
    public static let defaultEventLoops = min(4, max(1, ProcessInfo.processInfo.activeProcessorCount))
    /// Threads that run handlers which read or write the job store (the event loops never block on it).
    public var handlerThreads = 8
    /// Threads that run handlers which probe an uploaded file with FFmpeg: their own pool, so a slow probe never
    /// holds up a poll.
    public var probeThreads = 2
    /// Threads that run handlers which download an upload from a URL (and probe it).
    public var fetchThreads = 4
    /// Threads that write and hash upload bodies and remove dropped ones.
    public var fileThreads = 2
    /// Folder where uploads are streamed to before the handler takes them.
    public var uploadDirectory: URL
    /// Seconds since their last write after which partial uploads in `uploadDirectory` count as a dead process's,
    /// removed at start. 0: all of them (this process alone writes there). On storage other nodes share, their
    /// uploads and fetches in progress are there too. nil: none (the job queue removed them before its workers
    /// started fetching inputs, named alike).
    public var leftoverUploadAge: Double? = 0

    public init(uploadDirectory: URL) {
        self.uploadDirectory = uploadDirectory
    }
}
