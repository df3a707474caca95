// swift-tools-version:6.1
// Tributary: an open, self-hostable sync replica for object data.
//
// The target dependency lists below are the architecture (docs/Architecture.md): each layer may
// only use the layers under it, and the pure layers (model, merge) cannot reach LMDB because this file does
// not let them.
import CompilerPluginSupport
import PackageDescription

let upcomingFeatures: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Tributary",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Tributary", targets: ["Tributary"]),
        .library(name: "TributarySync", targets: ["TributarySync"]),
        .library(name: "TributaryMacros", targets: ["TributaryMacros"]),
        .executable(name: "tributaryd", targets: ["tributaryd"]),
        .executable(name: "tributary-log", targets: ["tributary-log"]),
        .executable(name: "tributary-bench", targets: ["tributary-bench"]),
        .executable(name: "tributary-demo", targets: ["tributary-demo"]),
        .executable(name: "tributary-sim", targets: ["tributary-sim"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swiftlang/swift-syntax", "600.0.0"..<"604.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // System libraries from Debian: apt-get install -y liblmdb-dev libzstd-dev libsqlite3-dev pkg-config
        .systemLibrary(name: "CLMDB", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        // SQLite, for tributary-bench's baseline only: apt-get install -y libsqlite3-dev
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // Storage: a safe Swift layer over LMDB, and the zstd codec.
        .target(name: "TributaryStorage", dependencies: ["CLMDB"], swiftSettings: upcomingFeatures),
        .target(name: "TributaryCompression", dependencies: ["CZstd"], swiftSettings: upcomingFeatures),

        // Model: values, schemas, instructions, changesets and their codec, clocks, version vectors. Pure.
        .target(name: "TributaryModel", swiftSettings: upcomingFeatures),

        // Merge: the pure merge engine (state + changeset -> new state + effects). No I/O.
        .target(name: "TributaryMerge", dependencies: ["TributaryModel"], swiftSettings: upcomingFeatures),

        // Query: the Realm Query Language (parser, type checker, evaluator). Pure.
        .target(name: "TributaryQuery", dependencies: ["TributaryModel"], swiftSettings: upcomingFeatures),

        // Log and views: the changeset log and the materialized views, over LMDB.
        .target(
            name: "TributaryLog",
            dependencies: ["TributaryModel", "TributaryStorage", "TributaryCompression"],
            swiftSettings: upcomingFeatures),
        .target(
            name: "TributaryViews",
            dependencies: ["TributaryModel", "TributaryMerge", "TributaryStorage"],
            swiftSettings: upcomingFeatures),

        // The public embedded API.
        .target(
            name: "Tributary",
            dependencies: [
                "TributaryModel", "TributaryMerge", "TributaryStorage", "TributaryCompression", "TributaryLog",
                "TributaryViews", "TributaryQuery",
            ],
            swiftSettings: upcomingFeatures),

        // @Model and @EmbeddedModel: a declaration's initial values as schema defaults, read at compile time. A
        // product of its own, so that apps that do not use the macros do not build swift-syntax.
        .target(
            name: "TributaryMacrosExpansion",
            dependencies: [
                .product(name: "SwiftSyntax", package: "swift-syntax"),
                .product(name: "SwiftSyntaxBuilder", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacros", package: "swift-syntax"),
                .product(name: "SwiftDiagnostics", package: "swift-syntax"),
                .product(name: "SwiftParser", package: "swift-syntax"),
            ],
            swiftSettings: upcomingFeatures),
        .macro(
            name: "TributaryMacrosPlugin",
            dependencies: [
                "TributaryMacrosExpansion", .product(name: "SwiftSyntax", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacros", package: "swift-syntax"),
                .product(name: "SwiftCompilerPlugin", package: "swift-syntax"),
            ],
            swiftSettings: upcomingFeatures),
        .target(
            name: "TributaryMacros", dependencies: ["Tributary", "TributaryMacrosPlugin"],
            swiftSettings: upcomingFeatures),

        // The sync protocol: message codec and session state machines. Pure: no I/O.
        .target(name: "TributaryProtocol", dependencies: ["TributaryModel"], swiftSettings: upcomingFeatures),

        // Sync over the network: the client apps embed, and the daemon's sessions, over SwiftNIO's WebSocket.
        .target(
            name: "TributarySync",
            dependencies: [
                "Tributary", "TributaryLog", "TributaryMerge", "TributaryModel", "TributaryProtocol",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: upcomingFeatures),
        .target(
            name: "TributaryDaemon",
            dependencies: [
                "Tributary", "TributaryCluster", "TributaryLog", "TributaryModel", "TributaryProtocol", "TributarySync",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: upcomingFeatures),

        // The cluster: the shared, commit-ordered changeset log of several daemons, on PostgreSQL.
        .target(
            name: "TributaryCluster",
            dependencies: [
                "Tributary", "TributaryLog", "TributaryModel", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: upcomingFeatures),

        // The convergence simulator: used by tributary-sim and by the test suite.
        .target(
            name: "TributarySimulator", dependencies: ["Tributary", "TributaryModel", "TributaryMerge"],
            swiftSettings: upcomingFeatures),

        // Tools.
        .executableTarget(
            name: "tributary-sim",
            dependencies: ["TributarySimulator", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Tools/tributary-sim", swiftSettings: upcomingFeatures),
        .executableTarget(
            name: "tributaryd",
            dependencies: [
                "TributaryCluster", "TributaryDaemon",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            path: "Tools/tributaryd", swiftSettings: upcomingFeatures),
        .executableTarget(
            name: "tributary-log",
            dependencies: [
                "Tributary", "TributaryLog", "TributaryModel",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/tributary-log", swiftSettings: upcomingFeatures),
        .executableTarget(
            name: "tributary-bench",
            dependencies: [
                "Tributary", "TributaryLog", "TributaryMerge", "TributaryModel", "TributaryCompression", "CLMDB",
                "CSQLite",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                "TributarySync", "TributaryDaemon", "TributaryProtocol", "TributaryCluster", "TributaryTestSupport",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tools/tributary-bench", swiftSettings: upcomingFeatures),
        .executableTarget(
            name: "tributary-demo",
            dependencies: [
                "Tributary", "TributarySync", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/tributary-demo", swiftSettings: upcomingFeatures),

        // Tests.
        .target(
            name: "TributaryTestSupport",
            dependencies: ["Tributary", "TributaryModel", "TributaryStorage", "TributaryProtocol"],
            path: "Tests/TributaryTestSupport", exclude: ["Tags", "Parallelism"], swiftSettings: upcomingFeatures),
        // The tags of the drills, fuzzers and slow suites (docs/Testing.md). A target of their own, so that
        // tributary-crash-child, which uses the support code above, does not link the testing library.
        .target(
            name: "TributaryTestTags", dependencies: ["TributaryTestParallelism"],
            path: "Tests/TributaryTestSupport/Tags",
            swiftSettings: upcomingFeatures),
        // Sets how many tests run at once as the test process loads (Parallelism/parallelism.c says why).
        .target(name: "TributaryTestParallelism", path: "Tests/TributaryTestSupport/Parallelism"),
        .executableTarget(
            name: "tributary-crash-child",
            dependencies: [
                "Tributary", "TributaryLog", "TributaryModel", "TributaryProtocol", "TributaryStorage", "TributarySync",
                "TributaryTestSupport",
            ],
            path: "Tests/tributary-crash-child", swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryStorageTests",
            dependencies: ["TributaryStorage", "TributaryModel", "TributaryTestSupport"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryCompressionTests", dependencies: ["TributaryCompression", "CZstd"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributarySyncTests",
            dependencies: [
                "Tributary", "TributaryModel", "TributaryMerge", "TributaryProtocol", "TributarySync",
                "TributaryDaemon", "TributaryCluster",
                "TributaryTestSupport", "TributaryTestTags", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"), .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            exclude: ["Certificates"], swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryClusterTests",
            dependencies: [
                "TributaryCluster", "Tributary", "TributaryDaemon", "TributaryLog", "TributaryModel",
                "TributaryProtocol",
                "TributarySync", "TributaryTestSupport", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryProtocolTests",
            dependencies: [
                "TributaryProtocol", "TributaryModel", "TributaryTestSupport", "TributaryTestTags",
                "TributaryTestParallelism",
            ],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryModelTests", dependencies: ["TributaryModel", "TributaryTestSupport", "TributaryTestTags"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryQueryTests", dependencies: ["TributaryQuery", "TributaryModel", "TributaryTestTags"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryMergeTests",
            dependencies: ["TributaryMerge", "TributaryModel", "TributaryTestSupport", "TributaryTestTags"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryLogTests",
            dependencies: ["TributaryLog", "TributaryModel", "TributaryStorage", "TributaryTestSupport"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryViewsTests", dependencies: ["TributaryViews", "TributaryModel"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributarySimulatorTests",
            dependencies: ["TributarySimulator", "TributaryModel", "TributaryTestSupport", "TributaryTestTags"],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryLogToolTests",
            dependencies: [
                "Tributary", "TributaryModel", "TributaryTestSupport", "TributaryTestTags", "tributary-log",
                "tributary-sim",
            ],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryMacrosTests",
            dependencies: [
                "TributaryMacrosExpansion", .product(name: "SwiftDiagnostics", package: "swift-syntax"),
                .product(name: "SwiftSyntaxBuilder", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacroExpansion", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacrosGenericTestSupport", package: "swift-syntax"),
            ],
            swiftSettings: upcomingFeatures),
        .testTarget(
            name: "TributaryTests",
            dependencies: [
                "Tributary", "TributaryModel", "TributaryMerge", "TributaryCompression", "TributaryStorage",
                "TributaryLog", "TributaryViews", "TributaryTestSupport", "TributaryTestTags", "tributary-crash-child",
                "TributaryMacros",
            ],
            swiftSettings: upcomingFeatures),
    ]
)
