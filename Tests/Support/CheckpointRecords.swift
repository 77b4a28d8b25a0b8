import Foundation

/// Reads a checkpoint folder as a later attempt would, for tests outside the pipeline: `manifest.json` with the
/// journal's lines it does not include yet (`journal.jsonl`: one JSON object a line, numbered by `sequence`).
public enum CheckpointRecords {
    /// The manifest as JSON.
    public static func manifest(_ folder: String) throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: folder + "/manifest.json"))
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw CocoaError(.fileReadCorruptFile)
        }
        return object
    }

    /// The single file's finished video segments: the manifest's, then the journal's after them.
    public static func videoSegments(_ folder: String) throws -> [[String: Any]] {
        let manifest = try manifest(folder)
        var segments = manifest["segments"] as? [[String: Any]] ?? []
        for entry in try journal(folder, after: manifest) {
            if let segment = (entry["video"] as? [String: Any])?["segment"] as? [String: Any] { segments.append(segment) }
        }
        return segments
    }

    /// A ladder's finished segments by track folder (`720p`, `audio`): the manifest's, then the journal's (for
    /// tracks the manifest has).
    public static func ladderSegments(_ folder: String) throws -> [String: [[String: Any]]] {
        let manifest = try manifest(folder)
        var tracks = (manifest["ladder"] as? [String: [String: Any]] ?? [:]).mapValues { $0["segments"] as? [[String: Any]] ?? [] }
        for entry in try journal(folder, after: manifest) {
            if let ladder = entry["ladder"] as? [String: Any], let track = ladder["folder"] as? String,
               let segment = ladder["segment"] as? [String: Any], tracks[track] != nil {
                tracks[track]!.append(segment)
            }
        }
        return tracks
    }

    /// The journal's entries the manifest does not include, in order, read as a resumed attempt reads them:
    /// complete lines only, skipping those the manifest includes, up to the first line that does not decode or
    /// does not follow on by number.
    private static func journal(_ folder: String, after manifest: [String: Any]) throws -> [[String: Any]] {
        var last = manifest["journalSequence"] as? Int ?? 0
        var lines = ((try? String(contentsOfFile: folder + "/journal.jsonl", encoding: .utf8)) ?? "").components(separatedBy: "\n")
        // After the last newline: nothing, or a line being written.
        lines.removeLast()
        var entries: [[String: Any]] = []
        for line in lines {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let sequence = object["sequence"] as? Int, let entry = object["entry"] as? [String: Any] else { break }
            if sequence <= last { continue }
            guard sequence == last + 1 else { break }
            last = sequence
            entries.append(entry)
        }
        return entries
    }
}
