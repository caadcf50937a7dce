import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// Key files outside the store directory (`--keys DIR` / `LEDGER_KEYS`, docs/keys.md), and the signer
/// interface a key kept elsewhere can stand behind.
@Suite struct KeyDirectoryTests {
    let directory = TemporaryDirectory("ledger-keys")
    let t = Fixtures.start

    /// `ledger init` of a store in `store` with its key files in `keys` and `root` (key `root.key`) as the
    /// first administrator: the paths and init's result.
    func initWithKeysElsewhere() throws -> (store: String, keys: String, root: String, created: LedgerBinary.Result) {
        let store = directory.path("store").path
        let keys = directory.path("keys").path
        let root = directory.path("root.key").path
        #expect(try LedgerBinary.run(["support", "keygen", "--out", root]).status == 0)
        let created = try LedgerBinary.run([
            "init", "--store", store, "--keys", keys, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--admin", "root",
            "--admin-public-key", root + ".pub",
        ])
        #expect(created.status == 0, "\(created.stderr)")
        return (store, keys, root, created)
    }

    /// Every file under `url`, recursively, as one blob per file.
    func contents(of url: URL) throws -> [Data] {
        let files = FileManager.default.enumerator(atPath: url.path)?.compactMap { $0 as? String } ?? []
        return files.compactMap { try? Data(contentsOf: url.appendingPathComponent($0)) }
    }

    @Test func aStoreWithItsKeysElsewhereWorksThroughEveryCommandGivenTheKeys() throws {
        defer { directory.remove() }
        let (store, keys, root, created) = try initWithKeysElsewhere()
        #expect(created.json["keyFile"] as? String == keys + "/ledger.key")
        #expect(created.json["signingKeyFile"] as? String == keys + "/ledger-signing.key")
        for name in ["ledger.key", "ledger-signing.key"] {
            #expect(!FileManager.default.fileExists(atPath: store + "/" + name), "\(name) is in the store directory")
            let mode = try FileManager.default.attributesOfItem(atPath: keys + "/" + name)[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
        // A copy of the store directory (a backup, a snapshot) holds no key material.
        let ledgerKey = try String(contentsOfFile: keys + "/ledger.key", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let signingKey = try String(contentsOfFile: keys + "/ledger-signing.key", encoding: .utf8)
        let signingBody = signingKey.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        for blob in try contents(of: URL(fileURLWithPath: store)) {
            #expect(blob.range(of: Data(ledgerKey.utf8)) == nil && blob.range(of: Data(signingBody.utf8)) == nil)
        }

        let purchase = Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t])
        let checkpoint = directory.path("cp.txt").path
        let bundle = directory.path("bundle.json").path
        let runs: [[String]] = [
            ["submit", "--trust-decoded"], ["binding", "--original-transaction-id", "1001"], ["account", "--uid", "alice"], ["log"],
            ["stats"], ["verify"], ["rebuild", "--check"], ["audit"], ["replay", "--original-transaction-id", "1001"],
            ["explain", "--uid", "alice", "--original-transaction-id", "1001"], ["signing-key"], ["checkpoint", "--out", checkpoint],
            ["verify", "--checkpoint", checkpoint], ["dispute", "export", "--original-transaction-id", "1001", "--out", bundle],
            ["compact"],
        ]
        for arguments in runs {
            // Without the key directory: refused, naming the key file and the way to give it.
            let refused = try LedgerBinary.run(arguments + ["--store", store], stdin: purchase + "\n")
            #expect(refused.status == 3, "\(arguments): \(refused.stderr)")
            #expect(refused.stderr.contains(store + "/ledger.key") && refused.stderr.contains("--keys DIR"), "\(refused.stderr)")
            // With --keys, and with LEDGER_KEYS.
            let given = try LedgerBinary.run(arguments + ["--store", store, "--keys", keys], stdin: purchase + "\n")
            #expect(given.status == 0, "\(arguments): \(given.stderr)")
            let fromEnvironment = try LedgerBinary.run(
                arguments + ["--store", store], stdin: purchase + "\n", environment: [StoreLocation.keysVariable: keys])
            #expect(fromEnvironment.status == 0, "\(arguments): \(fromEnvironment.stderr)")
        }
        let verified = try LedgerBinary.run(["dispute", "verify", bundle, "--public-key", keys + "/ledger-signing.key"])
        #expect(verified.status == 2, "a private key is no public key: \(verified.stdout)")
        let signingPublic = try LedgerBinary.run(["signing-key", "--store", store, "--keys", keys]).stdout
        try Data(signingPublic.utf8).write(to: directory.path("signing.pub"))
        #expect(try LedgerBinary.run(["dispute", "verify", bundle, "--public-key", directory.path("signing.pub").path]).status == 0)
        // The support tool too (the bootstrap: root enrols a second administrator), with root's key on standard input.
        let ann = directory.path("ann.key").path
        #expect(try LedgerBinary.run(["support", "keygen", "--out", ann]).status == 0)
        let enrolled = try LedgerBinary.run(
            [
                "support", "enroll", "--staff", "ann", "--roles", "administrator", "--public-key", ann + ".pub", "--admin", "root",
                "--admin-key", "-", "--store", store,
            ], stdin: try String(contentsOfFile: root, encoding: .utf8), environment: [StoreLocation.keysVariable: keys])
        #expect(enrolled.status == 0, "\(enrolled.stderr)")

        // A key directory holding keys is never adopted by a new ledger.
        let other = directory.path("other").path
        let reused = try LedgerBinary.run([
            "init", "--store", other, "--keys", keys, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox",
        ])
        #expect(reused.status == 3)
        #expect(reused.stderr.contains("already holds ledger key files"), "\(reused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: other + "/data.mdb"))
        // The demonstration's throwaway keys never go to a key directory.
        #expect(try LedgerBinary.run(["demo", "--store", directory.path("demo").path, "--keys", keys]).status == 2)
    }

    /// `--out` never replaces the store or a key file (as the service user, through the staff wrapper, it
    /// could): a path in the store or key directory, directly or through a symbolic link, and any path that
    /// is a symbolic link are refused; an output is written 0600.
    @Test func anOutputNeverReplacesTheStoreOrAKeyFile() throws {
        defer { directory.remove() }
        let store = directory.path("store").path
        let keys = directory.path("keys").path
        let exports = directory.path("exports")
        try FileManager.default.createDirectory(at: exports, withIntermediateDirectories: true)
        let created = try LedgerBinary.run([
            "init", "--store", store, "--keys", keys, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox",
        ])
        #expect(created.status == 0, "\(created.stderr)")
        let purchase = Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t])
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store, "--keys", keys], stdin: purchase + "\n").status == 0)
        try FileManager.default.createSymbolicLink(atPath: exports.path + "/link.json", withDestinationPath: store + "/data.mdb")
        try FileManager.default.createSymbolicLink(atPath: exports.path + "/keylink", withDestinationPath: keys)
        let protected = [store + "/data.mdb", keys + "/ledger.key", keys + "/ledger-signing.key"]
        let before = try protected.map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
        let targets = protected + [store + "/new.json", exports.path + "/link.json", exports.path + "/keylink/ledger.key", keys]
        for out in targets {
            for command in [
                ["dispute", "export", "--original-transaction-id", "1001", "--out", out], ["checkpoint", "--out", out],
                ["checkpoint", "--public-key-out", out], ["signing-key", "--out", out], ["evidence", "--out", out],
            ] {
                let refused = try LedgerBinary.run(command + ["--store", store, "--keys", keys])
                #expect(refused.status == 2, "\(command): \(refused.stderr)")
                #expect(refused.stderr.contains("refusing to write \(out)"), "\(command): \(refused.stderr)")
            }
        }
        #expect(try protected.map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == before)
        #expect(!FileManager.default.fileExists(atPath: store + "/new.json"))
        #expect(try LedgerBinary.run(["verify", "--store", store, "--keys", keys]).status == 0)
        // An ordinary output file, new or replaced, is the ledger's alone.
        let bundle = exports.path + "/case.json"
        try Data("old".utf8).write(to: URL(fileURLWithPath: exports.path + "/cp.txt"))
        for (command, out) in [
            (["dispute", "export", "--original-transaction-id", "1001", "--out", bundle], bundle),
            (["checkpoint", "--out", exports.path + "/cp.txt"], exports.path + "/cp.txt"),
        ] {
            let written = try LedgerBinary.run(command + ["--store", store, "--keys", keys])
            #expect(written.status == 0, "\(written.stderr)")
            #expect(try FileManager.default.attributesOfItem(atPath: out)[.posixPermissions] as? Int == 0o600)
        }
    }

    /// Every `support` subcommand takes `--keys DIR`, as every other command does.
    @Test func everySupportSubcommandTakesTheKeyDirectory() throws {
        defer { directory.remove() }
        let (store, keys, root, _) = try initWithKeysElsewhere()
        let ann = directory.path("ann.key").path
        let purchase = Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t])
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store, "--keys", keys], stdin: purchase + "\n").status == 0)
        let zero = String(repeating: "0", count: 64)
        let runs: [(arguments: [String], status: Int32)] = [
            (["keygen", "--out", ann], 0),
            (["enroll", "--staff", "ann", "--roles", "administrator", "--public-key", ann + ".pub", "--admin", "root", "--admin-key", root], 0),
            (["remove", "--staff", "nobody", "--admin", "root", "--admin-key", root], 1),
            (["cosign", "--change", zero], 1),
            (
                [
                    "request", "--case", "C-1", "--reason", "lost access", "--original-transaction-id", "1001", "--target-account", "bob",
                    "--target-auth", "re-auth", "--evidence", "order lookup", "--operator", "root", "--key", root,
                ], 1
            ),
            (["approve", "--case", "C-1", "--plan-digest", zero, "--approver", "root", "--key", root], 1),
            (["transfer", "--case", "C-1"], 1),
        ]
        for (arguments, status) in runs {
            let result = try LedgerBinary.run(["support"] + arguments + ["--store", store, "--keys", keys])
            #expect(result.status == status, "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("not an option"), "\(arguments): \(result.stderr)")
        }
    }

    /// `init` and `restore` with the key files beside `data.mdb` say so (one line on standard error);
    /// with a key directory of their own they print nothing there.
    @Test func keysBesideTheDataAreWarnedAbout() throws {
        defer { directory.remove() }
        let configuration = ["--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]
        let beside = try LedgerBinary.run(["init", "--store", directory.path("beside").path] + configuration)
        #expect(beside.status == 0, "\(beside.stderr)")
        let warning = beside.stderr.split(separator: "\n")
        #expect(warning.count == 1 && warning[0].hasPrefix("warning: ") && beside.stderr.contains("--keys DIR"), "\(beside.stderr)")
        #expect(beside.stderr.contains("docs/keys.md"), "\(beside.stderr)")
        let store = directory.path("store").path
        let keys = directory.path("keys").path
        let apart = try LedgerBinary.run(["init", "--store", store, "--keys", keys] + configuration)
        #expect(apart.status == 0 && apart.stderr.isEmpty, "\(apart.stderr)")
        let backup = directory.path("backup").path
        #expect(try LedgerBinary.run(["backup", "--store", store, "--keys", keys, "--out", backup, "--include-keys"]).status == 0)
        let restoredBeside = try LedgerBinary.run(["restore", "--from", backup, "--to", directory.path("restored").path])
        #expect(restoredBeside.status == 0, "\(restoredBeside.stderr)")
        #expect(restoredBeside.stderr.hasPrefix("warning: ") && restoredBeside.stderr.contains("--keys DIR"), "\(restoredBeside.stderr)")
        let restoredApart = try LedgerBinary.run(["restore", "--from", backup, "--to", directory.path("restored-2").path, "--keys", keys])
        #expect(restoredApart.status == 0 && restoredApart.stderr.isEmpty, "\(restoredApart.stderr)")
    }

    /// A key directory others may write to (who could delete or replace the key files) is refused, naming
    /// it and the fix, like a key file others may read.
    @Test func aKeyDirectoryOthersMayWriteIsRefused() throws {
        defer { directory.remove() }
        let configuration = ["--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]
        let store = directory.path("store").path
        let keys = directory.path("keys").path
        #expect(try LedgerBinary.run(["init", "--store", store, "--keys", keys] + configuration).status == 0)
        let open = directory.path("open").path
        try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: true)
        for path in [keys, open, store] { try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: path) }
        let refused = try LedgerBinary.run(["verify", "--store", store, "--keys", keys])
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(
            refused.stderr.contains("the key directory \(keys) has mode 777") && refused.stderr.contains("chmod 700 \(keys)"), "\(refused.stderr)")
        // Nor does a new ledger put its keys into one (its own store directory included).
        for arguments in [["--store", directory.path("other").path, "--keys", open], ["--store", open]] {
            let created = try LedgerBinary.run(["init"] + arguments + configuration)
            #expect(created.status == 3 && created.stderr.contains("chmod 700 \(open)"), "\(created.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: open).filter { $0.contains(".key") }.isEmpty)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: keys)
        #expect(try LedgerBinary.run(["verify", "--store", store, "--keys", keys]).status == 0)
    }

    @Test func anUpgradeCanKeepTheKeysInTheirOwnDirectory() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        let new = directory.path("new").path
        let keys = directory.path("keys").path
        try FormatOneFixture.copyStore(to: old)
        let upgraded = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new, "--keys", keys])
        #expect(upgraded.status == 0, "\(upgraded.stderr)")
        #expect(!FileManager.default.fileExists(atPath: new + "/ledger.key"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: keys + "/ledger.key")) == Data(contentsOf: old.appendingPathComponent("ledger.key")))
        #expect(try LedgerBinary.run(["verify", "--store", new, "--keys", keys]).status == 0)
        // The same key directory again: the keys it holds are the old store's, so they are kept.
        let again = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", directory.path("again").path, "--keys", keys])
        #expect(again.status == 0, "\(again.stderr)")
    }

    /// A signer other than the key file (here one that counts its signatures, as a hardware key's
    /// driver would stand behind the same interface) signs checkpoints and bundles; one holding another
    /// key is refused.
    @Test func anExternalSignerSignsCheckpointsAndBundles() throws {
        defer { directory.remove() }
        final class CountingSigner: LedgerSigner, @unchecked Sendable {
            let key: Ed25519PrivateKey
            var signatures = 0
            init(_ key: Ed25519PrivateKey) { self.key = key }
            var publicKey: Ed25519PublicKey { key.publicKey }
            func sign(_ message: [UInt8]) throws -> [UInt8] {
                signatures += 1
                return try key.sign(message)
            }
        }
        let location = StoreLocation.directory(directory.path("store"), keys: directory.path("keys"))
        let created = try Ledger.initialize(at: location, configuration: Fixtures.configuration)
        let key = try SigningKey.load(from: created.store.signingKeyURL)
        let signer = CountingSigner(key)
        let ledger = try Ledger(store: created.store, signer: signer)
        let (text, _) = try ledger.makeCheckpoint()
        #expect(signer.signatures == 1)
        #expect(try ledger.verifyCheckpoint(text, publicKey: key.publicKey).verified)
        _ = SubmitProtocol(ledger: ledger, trustDecoded: true).respond(
            to: Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t]))
        let bundle = try ledger.exportDispute(originalTransactionId: "1001")
        #expect(signer.signatures == 3, "the bundle's checkpoint and the bundle")
        #expect(try DisputeBundle.verify(bundle, publicKey: key.publicKey).records.count == 1)
        let stranger = try Ledger(store: created.store, signer: try Ed25519PrivateKey.generate())
        #expect(throws: LedgerStoreError.self) { try stranger.makeCheckpoint() }
    }
}
