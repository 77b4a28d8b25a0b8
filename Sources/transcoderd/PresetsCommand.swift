import Pipeline

/// `transcoderd presets`: lists the named presets.
enum PresetsCommand {
    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(Usage.presets)
            return 0
        }
        if let unknown = arguments.first(where: { $0 != "--json" }) {
            Console.error("unknown option \(unknown); run transcoderd presets --help")
            return 2
        }
        if arguments.contains("--json") {
            Console.printJSON(Preset.all, pretty: true)
        } else {
            for preset in Preset.all {
                print("\(preset.name.padding(toLength: 8, withPad: " ", startingAt: 0)) \(preset.summary)")
            }
        }
        return 0
    }
}
