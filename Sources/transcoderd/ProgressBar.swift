import Foundation
import Pipeline

/// A one-line progress bar redrawn on stderr.
final class ProgressBar {
    private var drawn = false

    func show(_ progress: TranscodeProgress) {
        let width = 30
        let filled = Int((progress.fraction * Double(width)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let line = progress.verifying != nil
            ? String(format: "\r[%@] getting back to the checkpoint: step %d                  ", bar, progress.verifying!)
            : progress.finishing != nil
            ? String(format: "\r[%@] %5.1f%%  finishing the output file                ", bar, progress.fraction * 100)
            : String(format: "\r[%@] %5.1f%%  %.1f/%.1f s  %.1f fps  %.2fx", bar, progress.fraction * 100,
                     progress.presentationTime, progress.duration, progress.framesPerSecond, progress.speed)
        Console.stderr(line)
        drawn = true
    }

    func end() {
        if drawn { Console.stderr("\n") }
        drawn = false
    }
}
