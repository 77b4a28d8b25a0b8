import Pipeline

/// `transcoderd probe INPUT`: prints a file's tracks.
enum ProbeCommand {
    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(Usage.probe)
            return 0
        }
        guard arguments.count == 1 else {
            Console.error("probe takes one INPUT; run transcoderd probe --help")
            return 2
        }
        do {
            Console.printJSON(try TranscodeSession.probe(path: arguments[0]), pretty: true)
            return 0
        } catch {
            Console.error(error.description)
            return 1
        }
    }
}
