import Foundation
import LedgerTestSupport
import Testing

/// A store the user running `ledger` may not read is reported as a permission error naming the path that
/// blocks (exit 3), through the binary: never as "no ledger", a malformed or wrong key, or a corrupt store,
/// and nothing changes. Run as root, the test runs the binary as `nobody` (setpriv) against a store owned by
/// nobody except the path under test; run as another user, it takes the owner's own permission on that
/// path away with chmod.
@Suite(.serialized) struct PermissionTests {
    let directory = TemporaryDirectory("ledger-permissions")
    var store: URL { directory.path("store") }
    static let nobody: UInt32 = 65534
    static let asRoot = geteuid() == 0

    /// Messages the old binary gave for a permission problem, which led operators to replace good files.
    static let misleading = ["no ledger at", "hexadecimal", "restore", "corrupt", "not an Ed25519", "not the key"]

    /// A store with one purchase, readable by the user the binary will run as.
    func makeStore() throws {
        // The runner must be able to reach the store and execute the binary.
        _ = chmod(directory.url.path, 0o755)
        let initialized = try LedgerBinary.run([
            "init", "--store", store.path, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox",
        ])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        let line = Fixtures.line([
            "type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1", at: Fixtures.start), "at": Fixtures.start,
        ])
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store.path], stdin: line + "\n").status == 0)
        if Self.asRoot {
            let files = try FileManager.default.contentsOfDirectory(atPath: store.path).map { store.appendingPathComponent($0).path }
            for path in [store.path] + files { #expect(chown(path, Self.nobody, Self.nobody) == 0) }
        }
    }

    /// Takes the runner's access to `path` away (root: hands it back to root, keeping mode 0600/0700).
    func deny(_ path: String) {
        if Self.asRoot {
            #expect(chown(path, 0, 0) == 0)
        } else {
            var info = stat()
            _ = stat(path, &info)
            #expect(chmod(path, info.st_mode & S_IFMT == S_IFDIR ? 0o600 : 0) == 0)
        }
    }

    /// Gives it back.
    func allow(_ path: String) {
        if Self.asRoot {
            #expect(chown(path, Self.nobody, Self.nobody) == 0)
        } else {
            var info = stat()
            _ = stat(path, &info)
            #expect(chmod(path, info.st_mode & S_IFMT == S_IFDIR ? 0o700 : 0o600) == 0)
        }
    }

    /// Runs the binary as the runner: nobody when this is root, else this user. The binary is copied beside the
    /// store so nobody may execute it wherever the package is checked out.
    func runAsRunner(_ arguments: [String]) throws -> LedgerBinary.Result {
        let binary = directory.path("ledger")
        if !FileManager.default.fileExists(atPath: binary.path) {
            try FileManager.default.copyItem(at: LedgerBinary.url, to: binary)
            _ = chmod(binary.path, 0o755)
        }
        if Self.asRoot {
            return try LedgerBinary.runProcess(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", "--", binary.path] + arguments)
        }
        return try LedgerBinary.runProcess(binary, arguments)
    }

    static let cases: [(denied: String, arguments: [String])] = [
        ("", ["binding", "--original-transaction-id", "1"]),
        ("ledger.key", ["binding", "--original-transaction-id", "1"]),
        ("data.mdb", ["account", "--uid", "alice"]),
        ("lock.mdb", ["verify"]),
        ("ledger.lock", ["binding", "--original-transaction-id", "1"]),
        ("ledger-signing.key", ["checkpoint", "--out", "/dev/null"]),
    ]

    @Test(arguments: cases.indices)
    func anUnreadableStoreFileIsAPermissionErrorNamingIt(index: Int) throws {
        defer { directory.remove() }
        let (denied, arguments) = Self.cases[index]
        try makeStore()
        let path = denied.isEmpty ? store.path : store.appendingPathComponent(denied).path
        let data = try Data(contentsOf: store.appendingPathComponent("data.mdb"))
        deny(path)
        let result = try runAsRunner(arguments + ["--store", store.path])
        allow(path)
        #expect(result.status == 3, "\(denied): \(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("permission denied (EACCES): cannot "), "\(denied): \(result.stderr)")
        #expect(result.stderr.contains(" \(path) as uid "), "\(denied): \(result.stderr)")
        for phrase in Self.misleading { #expect(!result.stderr.contains(phrase), "\(denied): \(result.stderr)") }
        #expect(try Data(contentsOf: store.appendingPathComponent("data.mdb")) == data)
        let verified = try runAsRunner(["verify", "--store", store.path])
        #expect(verified.status == 0, "\(denied): once allowed again: \(verified.stderr)")
    }

    /// An input file named on the command line that cannot be read says why (exit 2), naming it.
    @Test func anUnreadableInputFileIsAPermissionErrorNamingIt() throws {
        defer { directory.remove() }
        try makeStore()
        let key = directory.path("signing.pub")
        #expect(try LedgerBinary.run(["signing-key", "--out", key.path, "--store", store.path]).status == 0)
        if Self.asRoot { #expect(chown(key.path, 0, 0) == 0) }
        #expect(chmod(key.path, Self.asRoot ? 0o600 : 0) == 0)
        let result = try runAsRunner(["dispute", "verify", key.path, "--public-key", key.path])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("permission denied (EACCES): cannot read \(key.path) as uid "), "\(result.stderr)")
        _ = chmod(key.path, 0o644)
    }
}
