import CFFmpeg
import Foundation

/// The one place where FFmpeg's return codes become `MediaError`s.
enum FFmpeg {
    /// Most threads a codec may use. FFmpeg's and x264's own choice (`thread_count` 0) grows with the cores, and so
    /// does the memory a job needs (every thread has its stack and buffers under the job's memory limit): past 16
    /// threads x264 gains little, so a large machine is held to that.
    static let maxThreads = 16

    /// `thread_count` for a codec whose own choice is `perCore` threads a core: 0 (its choice) up to `maxThreads`.
    static func threadCount(perCore: Double) -> Int32 {
        Double(ProcessInfo.processInfo.activeProcessorCount) * perCore > Double(maxThreads) ? Int32(maxThreads) : 0
    }

    static let eof = tc_averror_eof()
    static let again = tc_averror_eagain()
    static let noSpace = tc_averror_enospc()
    static let noMemory = tc_averror_enomem()
    static let invalidData = tc_averror_invaliddata()
    static let noPTS = tc_nopts_value()
    static let timeBaseQ = AVRational(num: 1, den: tc_time_base())

    /// FFmpeg's text for an error code (`av_strerror`).
    static func errorText(_ code: Int32) -> String {
        var buffer = [CChar](repeating: 0, count: Int(AV_ERROR_MAX_STRING_SIZE))
        return buffer.withUnsafeMutableBufferPointer { pointer in
            String(cString: tc_err2str(code, pointer.baseAddress, pointer.count))
        }
    }

    /// Returns `result` when it is not negative; otherwise throws with what we were `doing`.
    @discardableResult
    static func check(_ result: Int32, _ doing: @autoclosure () -> String, code: String? = nil) throws(MediaError) -> Int32 {
        if result < 0 { throw MediaError.ffmpeg(result, doing(), code: code) }
        return result
    }

    /// Sets a string option on an FFmpeg object (`av_opt_set`), searching its children (codec private options).
    static func setOption(_ object: UnsafeMutableRawPointer?, _ name: String, _ value: String) throws(MediaError) {
        try check(av_opt_set(object, name, value, AV_OPT_SEARCH_CHILDREN), "setting \(name)=\(value)")
    }

    static func seconds(_ value: Int64, _ timeBase: AVRational) -> Double {
        Double(value) * Double(timeBase.num) / Double(timeBase.den)
    }

    static func isValid(_ rational: AVRational) -> Bool { rational.num > 0 && rational.den > 0 }

    /// The layout `channels` channels stand for when nothing says more: FFmpeg's default, but 3.0 (left, right,
    /// centre) for three, where FFmpeg's 2.1 makes the third a low-frequency channel (which a stereo downmix
    /// leaves out, and which AAC can only write with a program config element).
    static func defaultChannelLayout(_ layout: inout AVChannelLayout, channels: Int32) {
        if channels == 3 {
            av_channel_layout_from_mask(&layout, tc_layout_surround())
        } else {
            av_channel_layout_default(&layout, channels)
        }
    }
}

/// An FFmpeg option dictionary (`AVDictionary`), freed when it goes away.
final class OptionDictionary {
    var pointer: OpaquePointer?

    init(_ entries: [(String, String)] = []) {
        for (key, value) in entries { set(key, value) }
    }

    func set(_ key: String, _ value: String) {
        av_dict_set(&pointer, key, value, 0)
    }

    deinit { av_dict_free(&pointer) }
}
