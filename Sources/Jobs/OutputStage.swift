import Foundation
import Glibc
import Pipeline

/// A folder of one job's own in which its child process writes the output, so the child's sandbox may write there
/// and nowhere else in `outputs/` (other jobs' folders, finished or being written, stay out of its reach).
///
/// The stage is named as a partial output of the job (`<final>.<random>.partial`), so whatever finds what a killed
/// attempt left finds it too. The child writes `<stage>/out` (under a temporary name of its own inside the stage, as
/// every output is written) and flushes it; `commit` renames it into place beside the stage and removes the stage.
struct OutputStage {
    let finalPath: String
    let path: String

    /// Where the child writes the output folder.
    var childOutput: String { path + "/out" }

    init(finalPath: String) throws(MediaError) {
        self.finalPath = finalPath
        path = OutputDirectory.temporaryPath(for: finalPath)
        guard mkdir(path, 0o755) == 0 else {
            throw MediaError(code: "output_failed",
                             message: "Creating the output folder \(path) failed: \(String(cString: strerror(errno))).")
        }
    }

    /// Moves the child's finished (and flushed) folder into place and flushes the folder that holds it: once this
    /// returns, the output survives a power cut under `finalPath`.
    func commit() throws(MediaError) {
        // A folder, not a link the child made to somewhere else (Landlock refuses it links; without Landlock this
        // is the check).
        var status = stat()
        guard lstat(childOutput, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw MediaError(code: "output_failed", message: "The job's process left no output folder in \(path).")
        }
        guard rename(childOutput, finalPath) == 0 else {
            throw MediaError(code: "output_failed",
                             message: "Moving the output into place at \(finalPath) failed: \(String(cString: strerror(errno))).")
        }
        try FileDurability.syncDirectory(containing: finalPath)
        rmdir(path)
    }

    /// Removes the stage and whatever the child left in it (the output itself too when it was not committed).
    func discard() { _ = OutputRemoval.remove(path) }
}
