// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "OwnershipLedger",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "OwnershipLedger", targets: ["OwnershipLedger"]),
        .executable(name: "ledger", targets: ["ledger"]),
    ],
    targets: [
        .systemLibrary(name: "CLMDB", path: "Sources/CLMDB", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(
            name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", path: "Sources/CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CPostgres", path: "Sources/CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .target(name: "LedgerCore"),
        .target(name: "StrictJSON"),
        .target(name: "Projections", dependencies: ["LedgerCore"], path: "Projections"),
        .target(name: "LedgerCrypto", dependencies: ["LedgerCore", "COpenSSL"]),
        .target(name: "LedgerStore", dependencies: ["LedgerCore", "Projections", "LedgerCrypto", "CLMDB", "CPostgres"]),
        .target(name: "AppleSignedData", dependencies: ["LedgerCore", "LedgerCrypto", "COpenSSL", "StrictJSON"]),
        .target(name: "AppStoreServerAPI", dependencies: ["LedgerCrypto", "AppleSignedData"]),
        .target(
            name: "OwnershipLedger",
            dependencies: ["LedgerCore", "Projections", "LedgerCrypto", "LedgerStore", "AppleSignedData", "StrictJSON", "AppStoreServerAPI"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"]),
        .target(name: "FirebaseAuth", dependencies: ["LedgerCore", "LedgerCrypto", "COpenSSL", "StrictJSON"]),
        .target(name: "LedgerService", dependencies: ["OwnershipLedger", "HTTPServer", "FirebaseAuth", "StrictJSON", "AppStoreServerAPI"]),
        .executableTarget(name: "ledger", dependencies: ["OwnershipLedger", "StrictJSON", "LedgerService", "HTTPServer", "FirebaseAuth"]),
        .target(
            name: "LedgerTestSupport",
            dependencies: [
                "OwnershipLedger", "LedgerCore", "LedgerStore", "LedgerCrypto", "AppleSignedData", "StrictJSON", "AppStoreServerAPI", "HTTPServer",
            ],
            path: "Tests/LedgerTestSupport"),
        .testTarget(name: "StrictJSONTests", dependencies: ["StrictJSON", "LedgerTestSupport"]),
        .testTarget(name: "LedgerCoreTests", dependencies: ["LedgerCore", "Projections", "LedgerTestSupport"]),
        .testTarget(
            name: "LedgerStoreTests", dependencies: ["LedgerStore", "LedgerCrypto", "LedgerTestSupport", "OwnershipLedger", "Projections", "CLMDB"]),
        .testTarget(
            name: "AppleSignedDataTests", dependencies: ["AppleSignedData", "LedgerTestSupport"],
            resources: [.copy("Vectors")]),
        .testTarget(name: "LedgerCryptoTests", dependencies: ["LedgerCrypto", "LedgerTestSupport", "COpenSSL"]),
        .testTarget(name: "FirebaseAuthTests", dependencies: ["FirebaseAuth", "HTTPServer", "LedgerCrypto", "LedgerTestSupport"], exclude: ["Keys"]),
        .testTarget(
            name: "LedgerServiceTests",
            dependencies: ["LedgerService", "FirebaseAuth", "OwnershipLedger", "AppleSignedData", "LedgerCrypto", "LedgerTestSupport"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "LedgerTestSupport"], exclude: ["TLS"]),
        // `ledger` itself for HelpTests, which read the command dispatcher's table.
        .testTarget(name: "OwnershipLedgerTests", dependencies: ["OwnershipLedger", "LedgerStore", "LedgerTestSupport", "ledger"]),
        .testTarget(name: "PostgresStoreTests", dependencies: ["OwnershipLedger", "LedgerStore", "LedgerCore", "LedgerCrypto", "LedgerTestSupport"]),
        .testTarget(
            name: "AppStoreServerAPITests",
            dependencies: ["AppStoreServerAPI", "OwnershipLedger", "HTTPServer", "LedgerCrypto", "AppleSignedData", "LedgerTestSupport"]),
    ]
)

// One place for the Swift settings every Swift target shares.
for target in package.targets where target.type != .system {
    target.swiftSettings =
        (target.swiftSettings ?? []) + [
            .swiftLanguageMode(.v6),
            .enableUpcomingFeature("ExistentialAny"),
        ]
}
