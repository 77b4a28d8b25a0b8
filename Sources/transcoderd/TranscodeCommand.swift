import Dispatch
import Foundation
import Pipeline
import Server

/// `transcoderd transcode INPUT OUTPUT`: one transcode in the foreground, with progress and Ctrl-C.
enum TranscodeCommand {
    enum ProgressMode: String { case bar, json, none }

    struct Options {
        var input = ""
        var output = ""
        var settings = TranscodeSettings()
        var progress: ProgressMode = Console.stderrIsTerminal ? .bar : .none
        var checkpoint: String?

        /// A ladder, thumbnails or a path ending in "/" make a folder (which must not exist yet); else one file.
        var makesFolder: Bool { output.hasSuffix("/") || settings.container.isSegmented || settings.thumbnails != nil }

        /// The output folder's path, without trailing slashes.
        var outputFolder: String { String(output.reversed().drop { $0 == "/" }.reversed()) }
    }

    /// What the paths would make go wrong, found before any work instead of after it (the output is put in place
    /// last): an output that is the input (the source replaced by its transcode), a file output where a folder is,
    /// a folder output where anything is.
    static func checkPaths(_ options: Options) throws(UsageError) {
        var input = stat(), output = stat()
        let target = options.makesFolder ? options.outputFolder : options.output
        if let checkpoint = options.checkpoint {
            // The output is put in place last, by a rename that a checkpoint there (or inside the folder) fails.
            // Absolute, its links resolved as far as it exists (neither path need exist yet).
            func absolute(_ path: String) -> String {
                var existing = URL(fileURLWithPath: path).standardizedFileURL
                var rest: [String] = []
                while !FileManager.default.fileExists(atPath: existing.path), existing.path != "/" {
                    rest.insert(existing.lastPathComponent, at: 0)
                    existing.deleteLastPathComponent()
                }
                let base = realpath(existing.path, nil).map { resolved in
                    defer { free(resolved) }
                    return String(cString: resolved)
                } ?? existing.path
                return rest.reduce(base) { $0.hasSuffix("/") ? $0 + $1 : $0 + "/" + $1 }
            }
            let place = absolute(target), folder = absolute(checkpoint)
            if folder == place || folder.hasPrefix(place + "/") {
                throw UsageError(message: "--checkpoint \(checkpoint) is in the output's place; give a folder outside \(target)")
            }
        }
        guard stat(target, &output) == 0 else { return }
        if stat(options.input, &input) == 0, input.st_dev == output.st_dev, input.st_ino == output.st_ino {
            throw UsageError(message: "\(options.output) is the input: its transcode would replace it; give another output path")
        }
        if options.makesFolder {
            // An empty folder is replaced whole at the end, as before; anything else would fail only then.
            let isEmptyFolder = (output.st_mode & S_IFMT) == S_IFDIR && ((try? FileManager.default.contentsOfDirectory(atPath: target))?.isEmpty ?? false)
            guard isEmptyFolder else {
                throw UsageError(message: "\(target) exists; the output folder (a ladder, thumbnails, or a path ending in /) is made new")
            }
            return
        }
        if (output.st_mode & S_IFMT) == S_IFDIR {
            throw UsageError(message: "\(options.output) is a folder; give the output file's path (an existing file is replaced)")
        }
        // The file is written beside its path and renamed onto it: a device (`/dev/null`, as root) or a pipe would
        // be replaced by a regular file.
        if (output.st_mode & S_IFMT) != S_IFREG {
            throw UsageError(message: "\(options.output) is not a regular file (a device, pipe or socket); the output is renamed into its place, "
                             + "which would replace it: give a file's path")
        }
    }

    /// `options` with a link at the end of the output's path resolved to where it leads: the output is put in
    /// place by a rename, which replaced the link itself and left its target as it was. A link to nothing is
    /// refused (where it would lead is not the user's path).
    static func resolvingOutputLink(_ options: Options) throws(UsageError) -> Options {
        let target = options.makesFolder ? options.outputFolder : options.output
        var status = stat()
        guard lstat(target, &status) == 0, (status.st_mode & S_IFMT) == S_IFLNK else { return options }
        guard let resolved = realpath(target, nil) else {
            throw UsageError(message: "\(target) is a link to nothing; give the path of the output itself")
        }
        defer { free(resolved) }
        var options = options
        options.output = String(cString: resolved) + (options.output.hasSuffix("/") ? "/" : "")
        return options
    }

    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(Usage.transcode)
            return 0
        }
        let options: Options
        do {
            options = try resolvingOutputLink(parse(arguments))
            try checkPaths(options)
        } catch {
            Console.error(error.message)
            return 2
        }
        // One run at a time per checkpoint folder (`CheckpointLock`), held until the command returns.
        var checkpointLock: CheckpointLock?
        if let checkpoint = options.checkpoint {
            do {
                checkpointLock = try CheckpointLock(path: checkpoint)
            } catch {
                Console.error(error.message)
                return 1
            }
        }
        defer { withExtendedLifetime(checkpointLock) {} }
        if let checkpoint = options.checkpoint, !((try? FileManager.default.contentsOfDirectory(atPath: checkpoint))?.isEmpty ?? true) {
            // Run again after a crash, as `--checkpoint` invites: what the run that died was writing goes.
            removeLeftovers(of: options.makesFolder ? options.outputFolder : options.output)
        }
        let token = CancellationToken()
        let sources = Signals.onTerminate { token.cancel() }
        defer { sources.cancel() }

        let settings = options.settings
        let session = options.makesFolder
            ? TranscodeSession(inputPath: options.input, outputDirectory: options.outputFolder,
                               settings: settings, cancellation: token)
            : TranscodeSession(inputPath: options.input, outputPath: options.output, settings: settings, cancellation: token)
        session.checkpointDirectory = options.checkpoint
        let bar = ProgressBar()
        do {
            let result = try session.run { progress in
                switch options.progress {
                case .bar: bar.show(progress)
                case .json: Console.printJSON(ProgressLine(progress))
                case .none: break
                }
            }
            if options.progress == .bar { bar.end() }
            // Done: the checkpoint has served.
            if let checkpoint = options.checkpoint { TranscodeSession.removeCheckpoint(at: checkpoint) }
            Console.printJSON(result)
            return 0
        } catch {
            if options.progress == .bar { bar.end() }
            checkpointLock?.failed()
            Console.error(error.description)
            return error.code == "canceled" ? 130 : 1
        }
    }

    struct UsageError: Error { let message: String }

    /// Removes what runs killed on the way left beside `output`: `<output>.<hex>.partial`, a file or a folder
    /// (`OutputContainer`, `OutputDirectory`), each crash one more, a folder's made at the start, a film's nearly
    /// its whole size. Only when resuming from a checkpoint, whose lock this run holds: another run on the same
    /// output would be writing the same file.
    static func removeLeftovers(of output: String) {
        let url = URL(fileURLWithPath: output)
        let folder = url.deletingLastPathComponent().path, name = url.lastPathComponent
        guard !name.isEmpty, let entries = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        for entry in entries where entry.hasPrefix(name + ".") && entry.hasSuffix(".partial") {
            let middle = entry.dropFirst(name.count + 1).dropLast(".partial".count)
            guard (1...8).contains(middle.count), middle.allSatisfy(\.isHexDigit) else { continue }
            try? FileManager.default.removeItem(atPath: folder + "/" + entry)
        }
    }

    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        var options = Options()
        var positional: [String] = []
        var presetName: String?
        var settingsText: String?
        var index = 0
        func value(_ flag: String) throws(UsageError) -> String {
            index += 1
            guard index < arguments.count else { throw UsageError(message: "\(flag) needs a value") }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--settings": settingsText = try value(argument)
            case "--preset": presetName = try value(argument)
            case "--checkpoint": options.checkpoint = try value(argument)
            case "--progress":
                let mode = try value(argument)
                guard let parsed = ProgressMode(rawValue: mode) else {
                    throw UsageError(message: "--progress: expected bar, json or none, got \"\(mode)\"")
                }
                options.progress = parsed
            default:
                if argument.hasPrefix("--") { throw UsageError(message: "unknown option \(argument); run transcoderd transcode --help") }
                positional.append(argument)
            }
            index += 1
        }
        guard positional.count == 2 else {
            throw UsageError(message: "transcode takes INPUT and OUTPUT; run transcoderd transcode --help")
        }
        options.input = positional[0]
        options.output = positional[1]
        options.settings = try settings(text: settingsText, preset: presetName, output: options.output)
        // The API's uploads do not exist here: a watermark's "upload" is the image file's path. It was taken for an
        // upload id and failed, every time, once the transcode started.
        if let image = options.settings.filters?.video?.watermark?.upload {
            var status = stat()
            guard stat(image, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, access(image, R_OK) == 0 else {
                throw UsageError(message: "filters.video.watermark.upload: on the command line, the path of a PNG or JPEG file; \(image) is not a file this can read")
            }
            options.settings.filters?.video?.watermark?.imagePath = image
        }
        return options
    }

    /// Settings from `--settings` (JSON or @file) on top of `--preset`; where they name no container, the output
    /// file's extension chooses it (`containerNamed(by:)`).
    static func settings(text: String?, preset: String?, output: String) throws(UsageError) -> TranscodeSettings {
        var json = JSONValue.object([:])
        if let text {
            var data = Data(text.utf8)
            if text.hasPrefix("@") {
                let path = String(text.dropFirst())
                guard let contents = FileManager.default.contents(atPath: path) else {
                    throw UsageError(message: "--settings: cannot read \(path)")
                }
                data = contents
            }
            do { json = try JSONValue.parse(data) } catch { throw UsageError(message: "--settings: \(error.description)") }
        }
        // A preset's name alone, as the API takes it, is that preset asked by name: the output's extension still
        // chooses the container (`'"720p"'` into `clip.mov` wrote MP4 bytes).
        if case .string(let name) = json { json = .object(["preset": .string(name)]) }
        if let preset {
            switch json {
            case .object(var object):
                if let named = object["preset"], named != .null, named != .string(preset) {
                    throw UsageError(message: "--preset \(preset) and \"preset\" in --settings name two presets; give one")
                }
                object["preset"] = .string(preset)
                json = .object(object)
            default:
                throw UsageError(message: "--preset cannot be combined with a preset name in --settings")
            }
        }
        // A folder (a ladder, thumbnails, a path ending in "/") is not named after a container.
        if case .object(var object) = json, object["container"] == nil, object["thumbnails"] ?? .null == .null,
           !output.hasSuffix("/"), let container = try containerNamed(by: output) {
            object["container"] = .string(container.rawValue)
            json = .object(object)
        }
        do {
            let settings = try TranscodeSettings(json: json)
            try settings.checkAtIntake()
            return settings
        } catch {
            throw UsageError(message: "invalid settings: \(error.description)")
        }
    }
}

extension TranscodeCommand {
    /// The container an output file's extension names, as ffmpeg reads it: `out.mov` is a QuickTime movie,
    /// `song.m4a` audio only. MP4 bytes were written under any name, so `out.mkv` held no Matroska; an extension of a
    /// container transcoderd does not write is refused. Any other name (none, `.tmp`) keeps the default, MP4.
    static func containerNamed(by path: String) throws(UsageError) -> FileType? {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        let suffix = name[name.index(after: dot)...].lowercased()
        if suffix == "264" { return .h264 }
        if let type = FileType(rawValue: suffix), type != .hls { return type }
        let foreign: Set = ["mkv", "mka", "webm", "avi", "ts", "m2ts", "mts", "flv", "wmv", "asf", "ogg", "ogv", "oga",
                            "opus", "mpg", "mpeg", "3gp", "3g2", "mp3", "wav", "flac", "gif", "mxf", "m3u8", "mpd"]
        guard foreign.contains(suffix) else { return nil }
        let files = FileType.allCases.filter { !$0.isSegmented }.map { "." + $0.fileExtension }.joined(separator: ", ")
        throw UsageError(message: "\(path): transcoderd does not write .\(suffix) files; name the output \(files), or set \"container\" "
                         + "in --settings (a streaming ladder is {\"container\": \"hls\"} with an output folder)")
    }
}

/// One line of `--progress json`: `{"event": "progress", ...the API's progress fields}`.
struct ProgressLine: Encodable {
    let report: ProgressReport

    init(_ progress: TranscodeProgress) {
        report = ProgressReport(progress)
    }

    private enum CodingKeys: String, CodingKey { case event }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode("progress", forKey: .event)
        try report.encode(to: encoder)
    }
}
