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
        .systemLibrary(name: "CSeccomp", pkgConfig: "libseccomp", providers: [.apt(["libseccomp-dev"])]),
        .target(name: "CProcess"),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(name: "Locks"),
        .target(name: "Logging"),
        .target(name: "Crypto", dependencies: ["CCrypto"]),
        .target(name: "Outbound", dependencies: ["CCurl", "Crypto", "Locks"]),
        .target(name: "Pipeline", dependencies: ["CFFmpeg", "Locks"]),
        .target(name: "Isolation", dependencies: ["Pipeline", "CProcess", "CSeccomp", "Locks"]),
        .target(name: "Jobs", dependencies: ["Pipeline", "Isolation", "Outbound", "CSQLite", "CPostgres", "Locks", "Logging"]),
        .target(name: "Webhooks", dependencies: ["Jobs", "Outbound", "Crypto", "Locks", "Logging"]),
        .target(name: "Server", dependencies: ["Jobs", "Outbound", "Crypto", "Locks", "Logging", "CSystem"],
                resources: [.embedInCode("Web")]),
        .executableTarget(name: "transcoderd", dependencies: ["Pipeline", "Isolation", "Jobs", "Server", "Webhooks", "Outbound",
                                                             "Locks", "Logging"]),
        .executableTarget(name: "JobsBench", dependencies: ["Jobs", "Pipeline"], path: "bench/JobsBench"),
        .target(name: "TestSupport", dependencies: ["Pipeline", "Jobs", "Locks", "Logging"], path: "Tests/Support"),
        .testTarget(name: "PipelineTests", dependencies: ["Pipeline", "Locks", "TestSupport"]),
        .testTarget(name: "JobsTests", dependencies: ["Jobs", "Locks", "Logging", "TestSupport", "CProcess"]),
        .testTarget(name: "ServerTests", dependencies: ["Server", "transcoderd", "Isolation", "Locks", "Logging", "TestSupport"]),
        .testTarget(name: "OutboundTests", dependencies: ["Outbound", "Webhooks", "Crypto", "Jobs", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["transcoderd", "Jobs", "Locks", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
