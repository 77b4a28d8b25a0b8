import Foundation
import Pipeline
import Webhooks

// Entry point: dispatch on the subcommand; each command prints its own help with --help.
let arguments = Array(CommandLine.arguments.dropFirst())
// FFmpeg's own chatter would drown our one-line errors; TRANSCODER_FFMPEG_LOG=info brings it back.
MediaLog.setLevel(ProcessInfo.processInfo.environment["TRANSCODER_FFMPEG_LOG"] == "info" ? .info : .quiet)
let exitCode: Int32
switch arguments.first {
case nil, "-h", "--help", "help":
    print(Usage.main)
    exitCode = arguments.isEmpty ? 2 : 0
case "transcode":
    Signals.block()
    // A reader of the progress that goes away does not kill the transcode half-way (it would leave `.partial`).
    _ = signal(SIGPIPE, SIG_IGN)
    exitCode = TranscodeCommand.run(Array(arguments.dropFirst()))
case "presets":
    exitCode = PresetsCommand.run(Array(arguments.dropFirst()))
case "serve":
    Signals.block()
    exitCode = ServeCommand.run(Array(arguments.dropFirst()))
case "healthcheck":
    exitCode = HealthcheckCommand.run(Array(arguments.dropFirst()))
case "work":
    Signals.block()
    exitCode = WorkCommand.run(Array(arguments.dropFirst()))
case "probe":
    exitCode = ProbeCommand.run(Array(arguments.dropFirst()))
case "run-job":
    exitCode = RunJobCommand.run(Array(arguments.dropFirst()))
case "webhook-secret":
    // A fresh secret for --webhook-secret (and for the receivers that verify the signatures).
    if arguments.dropFirst().contains(where: { $0 == "-h" || $0 == "--help" }) {
        print("Usage: transcoderd webhook-secret\n\nPrints a fresh whsec_... secret for --webhook-secret and for the receivers that check the signatures.")
    } else {
        print(WebhookSecret.generate().text)
    }
    exitCode = 0
case "--version", "version":
    print("transcoderd \(Usage.version)")
    exitCode = 0
default:
    Console.error("unknown command \"\(arguments[0])\"; run transcoderd --help")
    exitCode = 2
}
exit(exitCode)
