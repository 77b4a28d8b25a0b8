import CFFmpeg

/// Muxes a complete checkpoint (video segments and the audio file) into the job's output file, without encoding:
/// packets are interleaved by decoding time and written as they were encoded. Starting it again after a crash
/// writes the file again from the same pieces.
enum CheckpointAssembler {
    /// - Parameters:
    ///   - inPlace: the file is written at `path` itself (its folder is temporary); otherwise under a temporary
    ///     name, renamed into place once complete.
    ///   - step: called on this thread as the work advances (every few hundred packets, then as the trailer moves
    ///     the index to the front): a long film takes a while, and a watchdog must see it move.
    static func assemble(_ manifest: CheckpointManifest, from checkpoint: Checkpoint, into path: String, inPlace: Bool,
                         fileType: FileType, cancellation: CancellationToken, step: () -> Void) throws(MediaError) {
        let container = try OutputContainer(path: path, fileType: fileType, inPlace: inPlace)
        var tracks: [(stream: Int, parameters: StreamParameters, files: [String])] = []
        if let video = manifest.video, !manifest.segments.isEmpty {
            tracks.append((try container.addStream(parameters: video), video, manifest.segments.map(\.file.name)))
        }
        if let audio = manifest.audio, let file = manifest.audioFile {
            tracks.append((try container.addStream(parameters: audio), audio, [file.name]))
        }
        do throws(MediaError) {
            try container.open()
            // Per track: the file being read, the files after it, and its next packet.
            var cursors = tracks.map { track in (reader: PacketLogReader?.none, pending: track.files[...], packet: Packet(), ready: false) }
            func advance(_ index: Int) throws(MediaError) {
                while true {
                    if cursors[index].reader == nil {
                        guard let name = cursors[index].pending.popFirst() else {
                            cursors[index].ready = false
                            return
                        }
                        cursors[index].reader = try PacketLogReader(path: checkpoint.file(name))
                    }
                    if try cursors[index].reader!.next(into: cursors[index].packet) {
                        cursors[index].ready = true
                        return
                    }
                    cursors[index].reader = nil
                }
            }
            for index in cursors.indices { try advance(index) }
            var written = 0
            while true {
                var earliest: (index: Int, time: Double)?
                for (index, cursor) in cursors.enumerated() where cursor.ready {
                    let value = cursor.packet.pointer.pointee
                    let time = FFmpeg.seconds(value.dts != FFmpeg.noPTS ? value.dts : value.pts, tracks[index].parameters.rationalTimeBase)
                    if earliest == nil || time < earliest!.time { earliest = (index, time) }
                }
                guard let next = earliest else { break }
                try container.write(cursors[next.index].packet, stream: tracks[next.index].stream,
                                    timeBase: tracks[next.index].parameters.rationalTimeBase)
                written += 1
                if written % 256 == 0 {
                    if cancellation.isCanceled { throw MediaError.canceled }
                    step()
                }
                try advance(next.index)
            }
            try container.finish(step: step, cancellation: cancellation)
        } catch {
            container.discard()
            throw error
        }
    }
}
