/// The server's fixed thread pools for blocking work, shared by every event loop, and the memory budget for the
/// request bodies they hold: nothing that can block runs on a loop, and nothing grows a thread per request.
final class ServerPools: Sendable {
    /// Handlers that use the job store.
    let handlers: BlockingPool
    /// Handlers that probe an uploaded file with FFmpeg (requests that carry a file).
    let probes: BlockingPool
    /// Upload writes, hashing, and removal of dropped uploads.
    let files: BlockingPool
    /// Handlers that wait for something else (`Router.Pool.waiting`).
    let waits: BlockingPool
    /// Handlers that download an upload from a URL (minutes, on another server's pace): their own pool, so they
    /// never hold up the probes of uploaded files.
    let fetches: BlockingPool
    let bodyMemory: BodyMemory
    /// Upload buffers past each upload's first (`UploadWriter`).
    let uploadMemory: BodyMemory

    init(configuration: HTTPServerConfiguration) {
        handlers = BlockingPool(name: "handler", threads: configuration.handlerThreads)
        probes = BlockingPool(name: "probe", threads: configuration.probeThreads)
        files = BlockingPool(name: "file", threads: configuration.fileThreads)
        // DELETE (up to 5 s for the job to stop) and cancel (up to a minute while an end is recorded).
        waits = BlockingPool(name: "wait", threads: 4)
        fetches = BlockingPool(name: "fetch", threads: configuration.fetchThreads)
        bodyMemory = BodyMemory(limit: configuration.maxBufferedBodyBytes)
        uploadMemory = BodyMemory(limit: configuration.maxUploadBufferBytes)
    }

    /// Runs what is queued and ends the threads.
    func shutdown() {
        handlers.shutdown()
        probes.shutdown()
        waits.shutdown()
        fetches.shutdown()
        files.shutdown()
    }
}
