import Foundation

/// Where a job's output lies, read without the rest of its row: retention and the sweep of stray outputs need only
/// this, and decoding whole rows read every file list (a long ladder's, some 1.5 MB of JSON) inside the store's lock
/// for 500 jobs at a time, and at every start for every job with a folder in `outputs/`.
public struct JobOutput: Sendable, Equatable {
    public let id: String
    public let state: JobState
    /// As `Job.outputRoot`.
    public let outputRoot: String?

    /// The columns it is read from.
    static let columns = "id, state, output_path, output_files IS NULL AS single_file"

    init(id: String, state: JobState, outputRoot: String?) {
        self.id = id
        self.state = state
        self.outputRoot = outputRoot
    }

    /// A job's output root: the folder its main file at `path` is in, or, for a job from before outputs were
    /// folders (no file list), the file itself.
    static func root(path: String?, singleFile: Bool) -> String? {
        guard let path else { return nil }
        return singleFile ? path : URL(fileURLWithPath: path).deletingLastPathComponent().path
    }
}
