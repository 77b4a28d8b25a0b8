// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "transcoderd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "transcoderd", targets: ["transcoderd"]),
        .executable(name: "jobs-bench", targets: ["JobsBench"]),
    ],
    targets: [
        .systemLibrary(
            name: "CFFmpeg",
            pkgConfig: "libavformat",
            providers: [.apt(["libavformat-dev", "libavcodec-dev", "libavutil-dev", "libswscale-dev",
                              "libswresample-dev"])]
        ),
        .systemLibrary(name: "CSystem"),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .target(name: "Locks"),
        .target(name: "Pipeline", dependencies: ["CFFmpeg"]),
        .target(name: "Jobs", dependencies: ["Pipeline", "CSQLite", "Locks"]),
        .target(name: "Server", dependencies: ["Jobs", "Locks", "CSystem", "CCrypto"]),
        .executableTarget(name: "transcoderd", dependencies: ["Pipeline", "Jobs", "Server", "Locks"]),
        .executableTarget(name: "JobsBench", dependencies: ["Jobs"], path: "bench/JobsBench"),
        .target(name: "TestSupport", dependencies: ["Pipeline", "Jobs", "Locks"], path: "Tests/Support"),
        .testTarget(name: "PipelineTests", dependencies: ["Pipeline", "Locks", "TestSupport"]),
        .testTarget(name: "JobsTests", dependencies: ["Jobs", "Locks", "TestSupport"]),
        .testTarget(name: "ServerTests", dependencies: ["Server", "transcoderd", "Locks", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["transcoderd", "Jobs", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
