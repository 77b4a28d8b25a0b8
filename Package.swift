// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "transcoderd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "transcoderd", targets: ["transcoderd"]),
    ],
    targets: [
        .systemLibrary(
            name: "CFFmpeg",
            pkgConfig: "libavformat",
            providers: [.apt(["libavformat-dev", "libavcodec-dev", "libavutil-dev", "libswscale-dev",
                              "libswresample-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .target(name: "Pipeline", dependencies: ["CFFmpeg"]),
        .target(name: "Server", dependencies: ["Pipeline"]),
        .executableTarget(name: "transcoderd", dependencies: ["Pipeline", "Server"]),
        .target(name: "TestSupport", dependencies: ["Pipeline"], path: "Tests/Support"),
        .testTarget(name: "PipelineTests", dependencies: ["Pipeline", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["transcoderd", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
