/// What a job's checkpoint folder holds, as `manifest.json` says: the encoded video in closed-GOP segments on the
/// key-frame grid, the encoded audio in one file once complete, each with its size and SHA-256, and what they were
/// made with (a fingerprint of the settings and input, and the streams' parameters). Only files listed here are
/// trusted, and only once their checksums match again.
struct CheckpointManifest: SealedRecord, Equatable {
    /// A file of packets, finished and flushed to disk.
    struct File: Codable, Equatable {
        /// Name inside the checkpoint folder.
        var name: String
        var bytes: Int
        var sha256: String
        var packets: Int
    }

    /// A video segment: packets from one key frame up to the next segment's.
    struct Segment: Codable, Equatable {
        var number: Int
        var file: File
        /// Output-timeline seconds from its first frame to the end of its last.
        var start: Double
        var end: Double
        /// Its latest presentation time, in the video time base: a resumed encode starts after it.
        var lastPresentation: Int64
    }

    /// A track of a ladder: what its playlists need, and its segments (they stay in the checkpoint's `ladder/`
    /// folder, in the ladder's own layout).
    struct LadderTrackRecord: Codable, Equatable {
        /// Position among the renditions (largest first); audio after them.
        var order: Int
        var codecs: String
        var width: Int?
        var height: Int?
        var frameRate: [Int32]?
        /// `PQ` or `HLG` for HDR video (absent in checkpoints written before it was recorded: SDR).
        var videoRange: String?
        var sampleRate: Int?
        var channels: Int?
        var timescale: Int32
        var offset: Int64
        var segments: [SegmentedOutput.Segment] = []
        /// Per segment, its latest presentation time in the encoder's time base.
        var lastPresentation: [Int64] = []
        var complete = false

        var isVideo: Bool { width != nil }
    }

    /// The still pictures in the checkpoint's `stills/` folder, recorded once the video is complete (they are
    /// taken from the same decode).
    struct Stills: Codable, Equatable {
        /// Thumbnails `00001.jpg` up to this number.
        var thumbnails: Int
        var poster: Bool
        /// The sprite's layout, when there is one.
        var storyboard: Storyboard?
    }

    /// A finished piece, recorded as one line of the checkpoint's journal rather than by writing the whole
    /// manifest again (which grew with every segment: a 2 h film's last one was 0.7 MB, 1.3 GB written in all).
    enum Entry: Codable, Equatable {
        /// A video segment of a single file.
        case video(segment: Segment)
        /// A segment of a ladder's track `folder`, with its latest presentation time (encoder time base).
        case ladder(folder: String, segment: SegmentedOutput.Segment, lastPresentation: Int64)
    }

    /// A line of the journal: entries are numbered from 1, without gaps, over the checkpoint's life.
    struct JournalLine: SealedRecord, Equatable {
        var sequence: Int
        var entry: Entry
        var checksum: String?
    }

    /// 2: a frame rate asked above the source's keeps the source's clock, so a ladder's stored times from 1 would
    /// be read in another time base. 3: the manifest and each journal line carry their own checksum
    /// (`SealedRecord`); one without is not used.
    static let currentVersion = 3

    var version = CheckpointManifest.currentVersion
    /// Of the settings, the input and this format: a checkpoint made with anything else is not used.
    var fingerprint: String
    /// Seconds of the segment grid.
    var segmentSeconds: Double
    var video: StreamParameters?
    var segments: [Segment] = []
    /// Every video packet is in `segments`.
    var videoComplete = false
    /// The pictures taken with the video, once it is complete.
    var stills: Stills?
    var audio: StreamParameters?
    /// The whole encoded audio; nil until it is complete.
    var audioFile: File?
    /// A ladder's tracks, by folder.
    var ladder: [String: LadderTrackRecord] = [:]
    /// The time offset of every file of a ladder (decided once, from every encoder's start delay).
    var ladderOffset: Double?
    /// The last journal entry this manifest includes: a journal line up to it was folded in already (the process
    /// stopped between writing the manifest and emptying the journal). nil: none yet (or an older manifest).
    var journalSequence: Int?
    /// Of the rest of the manifest, as written (`SealedRecord`).
    var checksum: String?

    init(fingerprint: String, segmentSeconds: Double) {
        self.fingerprint = fingerprint
        self.segmentSeconds = segmentSeconds
    }

    /// Every video frame in the segments: of the output, encoded by this attempt or an earlier one.
    var videoFrames: Int { segments.reduce(0) { $0 + $1.file.packets } }

    /// Adds what a journal entry records.
    mutating func apply(_ entry: Entry) {
        switch entry {
        case .video(let segment):
            segments.append(segment)
        case .ladder(let folder, let segment, let last):
            ladder[folder]?.segments.append(segment)
            ladder[folder]?.lastPresentation.append(last)
        }
    }

    /// Where the finished segments end: the resumed encode keeps frames presented after `lastPresentation`, from
    /// `seconds` of output on. nil when no segment is finished.
    var resumePoint: (seconds: Double, lastPresentation: Int64)? {
        segments.last.map { ($0.end, $0.lastPresentation) }
    }
}
