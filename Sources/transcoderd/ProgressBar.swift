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
            ? String(format: "[%@] getting back to the checkpoint: step %d", bar, progress.verifying!)
            : progress.finishing != nil
            ? String(format: "[%@] %5.1f%%  finishing the output file", bar, progress.fraction * 100)
            : String(format: "[%@] %5.1f%%  %.1f/%.1f s  %.1f fps  %.2fx", bar, progress.fraction * 100,
                     progress.presentationTime, progress.duration, progress.framesPerSecond, progress.speed)
        // Back to the line's start, the new text, and the rest of the old line erased (a shorter line left its tail).
        Console.stderr("\r" + line + (Console.stderrIsTerminal ? "\u{1B}[K" : ""))
        drawn = true
    }

    func end() {
        if drawn { Console.stderr("\n") }
        drawn = false
    }
}
