import Pipeline

/// Help texts of the command line.
enum Usage {
    static let version = "0.1.0"

    static let main = """
        transcoderd \(version) — an HTTP transcoding service on FFmpeg (H.264/AAC in MP4, MOV or M4V)

        Usage:
          transcoderd serve [--host H] [--port P] [--data DIR] [--store URL] [--workers N] ...
                                         the HTTP API and job queue (see serve --help)
          transcoderd transcode INPUT OUTPUT [--settings JSON | --settings @FILE | --preset NAME] [--progress bar|json|none]
                                [--checkpoint DIR]
          transcoderd work [--data DIR] [--store URL] [--workers N] [--exit-when-idle]
                                         run the data directory's queued jobs (no HTTP)
          transcoderd healthcheck        exit 0 if the local server answers /healthz (for containers)
          transcoderd presets            list the named presets and their settings
          transcoderd probe INPUT        print the tracks of a media file as JSON
          transcoderd webhook-secret     print a fresh webhook signing secret (for --webhook-secret)
          transcoderd --version

        Run `transcoderd COMMAND --help` for a command's details.
        """

    static let transcode = """
        Usage: transcoderd transcode INPUT OUTPUT [options]

        Transcodes INPUT (a local file: MP4/MOV, Matroska/WebM, AVI, MPEG-TS/PS, FLV, WAV, MP3, AAC, Ogg, FLAC)
        into OUTPUT as H.264 video and AAC audio. OUTPUT is written under a temporary name and appears only
        when it is complete; on failure or Ctrl-C nothing is left behind. With "container": "hls", with
        "thumbnails", or when OUTPUT ends in "/", OUTPUT is a new folder (output.mp4 or master.m3u8 and
        manifest.mpd with the segments, plus thumbnails/, storyboard.jpg, storyboard.vtt, poster.jpg).
        Where the settings name no container, OUTPUT's extension chooses it: .mp4, .mov, .m4v, .m4a (audio
        only), .h264 or .264 (raw video only), .aac (raw audio only); another name is MP4, and an extension of a
        container transcoderd does not write (.mkv, .webm, .ts, ...) is refused.

        Exit status: 0 done, 1 the transcode failed, 2 bad arguments, 130 stopped (Ctrl-C, SIGTERM, hang-up).

        Options:
          --settings JSON     output settings as JSON text, or @FILE to read them from a file
          --preset NAME       start from a named preset (\(Preset.names.joined(separator: ", "))); --settings adds to it
          --progress MODE     bar (default on a terminal): a progress bar on stderr
                              json: one JSON object per line on stdout while it runs
                              none: no progress (default when stderr is not a terminal)
          --checkpoint DIR    keep durable pieces of the encoded video and audio in DIR while it runs; run the
                              same command again after Ctrl-C or a crash and it continues from the last finished
                              segment (2 s, the key-frame interval) instead of from the start (DIR is removed on success;
                              one run at a time per DIR)
          -h, --help          this help

        Settings (every key optional; unknown keys are refused):
          {
            "container": "mp4" | "mov" | "m4v" | "m4a"                default OUTPUT's (mp4); m4a: audio only;
                       | "h264" | "aac" | "hls",                      h264/aac: raw Annex B / ADTS streams;
                                                                      hls: a CMAF ladder, HLS + DASH
            "renditions": "auto" | [{"video": {...}}, ...],           hls only: 1-8 rungs over "video";
                                                                      default auto (Apple's table, ≤ 5)
            "segmentDuration": 6,                                     hls only: seconds, 1-60
            "thumbnails": {"interval": 2 | "count": 10,               JPEGs from the same decode
                           "width": 160, "storyboard": true,          sprite + WebVTT #xywh cues
                           "poster": 0.1 | {"time": 12.5}},           fraction of the duration or seconds
            "video": {                                                or "copy", or null to drop the video
              "codec": "h264",
              "width": 1280, "height": 720,                           even, ≤ 8192; default the display size;
                                                                      one of them alone keeps the aspect ratio;
                                                                      both at most 8192×4352 in macroblocks
              "scalingMode": "fit" | "fill" | "stretch",              with both: fit inside (the output shrinks
                                                                      to the picture, no bars), crop to fill, or stretch;
                                                                      a shape change mid-stream: bars (fit), cropped (fill)
              "averageBitRate": 2000000,                              bits/s; default width × height × 4 (min 64000)
              "maxKeyFrameInterval": 60,                              frames; default 2 s of frames
              "profile": "baseline" | "main" | "high",                default high
              "level": "4.1",                                         default: chosen by the encoder
              "frameRate": 30,                                        frames/s; default the source's
              "preset": "veryfast",                                   x264 speed preset
              "allowUpscaling": true,                                 false: never larger than the source
              "color": {"primaries": "bt709", "transfer": "bt709",    tags written and matrix converted to;
                        "matrix": "bt709" | "bt601", "range": "tv",   default the source's (untagged: BT.601
                        "hdr": "tonemap" | "keep"}                    for SD, BT.709 for HD); an HDR source
                                                                      (PQ, HLG) is tone-mapped to SDR BT.709
                                                                      unless "hdr" is "keep"
            },
            "audio": {                                                or "copy", or null to drop the audio
              "codec": "aac", "bitRate": 128000, "sampleRate": 44100, "channels": 2
            },
            "filters": {                                              effects before scaling and encoding
              "video": {"crop": {"x": 0, "y": 0, "width": 1280, "height": 720}, "grayscale": true,
                        "brightness": 0.1, "contrast": 1.2, "saturation": 1.0,
                        "watermark": {"upload": "logo.png", ...}},  here: a PNG/JPEG file's path
              "audio": {"volume": 1.5, "pitch": 1.25, "tempo": 1.0, "normalize": true}
            },
            "preset": "720p"                                          a named preset to start from
                                                                      (presets fit their box, never upscale)
          }
        Rotated sources come out upright and anamorphic ones with square pixels.

        On success the last line on stdout is a JSON object describing the output. On failure the exit status is 1
        and stderr has one line: `error: CODE: message`.
        """

    static let presets = """
        Usage: transcoderd presets [--json]

        Lists the named presets. With --json, prints them as a JSON array with their full settings.
        """

    static let probe = """
        Usage: transcoderd probe INPUT

        Prints INPUT's tracks as JSON, read the same locked-down way as a transcode.
        """
}
