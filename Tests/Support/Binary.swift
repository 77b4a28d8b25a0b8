import Foundation

/// Where the built `transcoderd` executable is: beside the test bundle in SwiftPM's build folder.
public enum Binary {
    public static let path: String = {
        var directory = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("transcoderd").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("transcoderd").path
    }()
}
