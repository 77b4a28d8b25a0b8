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

    /// A ladder's finished segments by track folder (`720p`, `audio`): the manifest's, then the journal's.
    public static func ladderSegments(_ folder: String) throws -> [String: [[String: Any]]] {
        let manifest = try manifest(folder)
        var tracks = (manifest["ladder"] as? [String: [String: Any]] ?? [:]).mapValues { $0["segments"] as? [[String: Any]] ?? [] }
        for entry in try journal(folder, after: manifest) {
            if let ladder = entry["ladder"] as? [String: Any], let track = ladder["folder"] as? String,
               let segment = ladder["segment"] as? [String: Any] {
                tracks[track, default: []].append(segment)
            }
        }
        return tracks
    }

    /// The journal's entries the manifest does not include, in order; complete lines only.
    private static func journal(_ folder: String, after manifest: [String: Any]) throws -> [[String: Any]] {
        let included = manifest["journalSequence"] as? Int ?? 0
        var lines = ((try? String(contentsOfFile: folder + "/journal.jsonl", encoding: .utf8)) ?? "").components(separatedBy: "\n")
        // After the last newline: nothing, or a line being written.
        lines.removeLast()
        return try lines.compactMap { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let sequence = object["sequence"] as? Int, sequence > included else { return nil }
            return object["entry"] as? [String: Any]
        }
    }
}
