import Foundation
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// Every JSON output of `ledger` is documented by a schema in docs/schemas (docs/output.md): each
/// command's real output, on a store holding every kind of record, must match its schema exactly
/// (objects admit no undocumented field), so the documentation cannot drift from the output.
@Suite struct OutputSchemaTests {
    let schemas = OutputSchemas.shared

    /// Checks every line of `result` (or the whole output as one document) against `schema`.
    func expect(
        _ result: LedgerBinary.Result, _ schema: String, lines: Bool = true, status: Int32 = 0, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(result.status == status, "\(schema): \(result.stderr)", sourceLocation: sourceLocation)
        let documents = lines ? result.lines : [result.stdout]
        #expect(!documents.isEmpty, "\(schema): no output", sourceLocation: sourceLocation)
        for document in documents {
            let problems = schemas.problems(document, against: schema)
            #expect(
                problems.isEmpty, "\(schema): \(problems.prefix(5).joined(separator: "; ")) in \(document.prefix(300))",
                sourceLocation: sourceLocation)
        }
    }

    @Test func everyCommandsJSONOutputMatchesItsDocumentedSchema() throws {
        let staffed = try ReleaseEvidenceTests.staffedLedger("ledger-schemas")
        defer { staffed.directory.remove() }
        try ReleaseEvidenceTests().play(staffed, signed: true)
        let directory = staffed.directory
        let store = staffed.ledger.store.location.arguments
        func run(_ arguments: [String], stdin: String = "") throws -> LedgerBinary.Result { try LedgerBinary.run(arguments, stdin: stdin) }
        let id = ReleaseEvidenceTests.transactionIds[4]  // the lineage moved by support recovery

        expect(try run(["binding", "--original-transaction-id", id] + store), "binding.schema.json")
        expect(try run(["account", "--uid", ReleaseEvidenceTests.uids[5]] + store), "account.schema.json")
        expect(try run(["log"] + store), "log.schema.json")
        expect(try run(["stats"] + store), "stats.schema.json")
        expect(try run(["rebuild", "--check"] + store), "rebuild.schema.json")
        expect(try run(["replay", "--original-transaction-id", id] + store), "replay.schema.json")
        expect(try run(["explain", "--uid", ReleaseEvidenceTests.uids[5], "--original-transaction-id", id] + store), "explain.schema.json")
        expect(try run(["audit"] + store), "audit.schema.json")
        let checkpoint = directory.path("cp.txt").path
        expect(try run(["checkpoint", "--out", checkpoint] + store), "checkpoint.schema.json")
        expect(try run(["verify", "--checkpoint", checkpoint] + store), "verify.schema.json")
        try Data("not a checkpoint".utf8).write(to: directory.path("bad.txt"))
        expect(try run(["verify", "--checkpoint", directory.path("bad.txt").path] + store), "verify.schema.json", status: 1)
        let publicKey = directory.path("signing.pub").path
        try Data(try staffed.ledger.signer().publicKey.pem.utf8).write(to: URL(fileURLWithPath: publicKey))
        let bundle = directory.path("dispute.json").path
        expect(try run(["dispute", "export", "--original-transaction-id", id, "--out", bundle] + store), "dispute-export.schema.json")
        expect(LedgerBinary.Result(status: 0, stdout: try String(contentsOfFile: bundle, encoding: .utf8), stderr: ""), "dispute-bundle.schema.json")
        let disputeVerify = try run(["dispute", "verify", bundle, "--public-key", publicKey])
        expect(
            LedgerBinary.Result(status: disputeVerify.status, stdout: disputeVerify.lines.dropLast().joined(separator: "\n"), stderr: ""),
            "replay.schema.json")
        expect(LedgerBinary.Result(status: 0, stdout: disputeVerify.lines.last ?? "", stderr: ""), "dispute-verify.schema.json")
        let withheld = directory.path("withheld.json").path
        _ = try run(["dispute", "export", "--original-transaction-id", id, "--out", withheld, "--withhold-private"] + store)
        expect(
            LedgerBinary.Result(status: 0, stdout: try String(contentsOfFile: withheld, encoding: .utf8), stderr: ""), "dispute-bundle.schema.json")
        try Data("{}\n".utf8).write(to: directory.path("empty.json"))
        expect(try run(["dispute", "verify", directory.path("empty.json").path, "--public-key", publicKey]), "dispute-verify.schema.json", status: 1)
        let evidence = directory.path("evidence.json").path
        expect(try run(["evidence", "--out", evidence] + store), "evidence.schema.json")
        expect(LedgerBinary.Result(status: 0, stdout: try String(contentsOfFile: evidence, encoding: .utf8), stderr: ""), "evidence-file.schema.json")
        expect(try run(["evidence", "verify", evidence, "--public-key", publicKey]), "evidence-verify.schema.json")
        expect(
            try run(["evidence", "verify", directory.path("empty.json").path, "--public-key", publicKey]), "evidence-verify.schema.json", status: 1)

        // An independent verifier, written from the docs alone (Python standard library), accepts both
        // files and refuses a changed byte.
        for file in [bundle, withheld, evidence] {
            let checked = try Self.independentVerifier([file, publicKey])
            #expect(checked.status == 0 && checked.json["verified"] as? Bool == true, "\(file): \(checked.stdout) \(checked.stderr)")
        }
        var changed = try Data(contentsOf: URL(fileURLWithPath: evidence))
        changed[changed.count / 3] ^= 0x04
        try changed.write(to: directory.path("changed.json"))
        #expect(try Self.independentVerifier([directory.path("changed.json").path, publicKey]).status == 1)

        // The support tool: a roster proposal and its review, a request refused, a dry run.
        let keyFile = directory.path("cy.key").path
        expect(try run(["support", "keygen", "--out", keyFile]), "support-keygen.schema.json")
        let rootKey = directory.path("root.key")
        try Data(staffed.root.pem.utf8).write(to: rootKey)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: rootKey.path)
        let proposal = try run(
            [
                "support", "enroll", "--staff", "cy", "--roles", "operator", "--public-key", keyFile + ".pub", "--admin", "root", "--admin-key",
                rootKey.path,
            ]
                + store)
        expect(proposal, "support.schema.json")
        expect(try run(["support", "cosign", "--change", proposal.json["changeDigest"] as? String ?? ""] + store), "support.schema.json")
        expect(try run(["support", "transfer", "--case", "EVIDENCE-1"] + store), "support.schema.json", status: 1)
        let refused = try run(
            [
                "support", "request", "--case", "SCHEMA-1", "--reason", "schema check", "--original-transaction-id", id, "--target-account", "x-uid",
                "--target-auth", "re-auth", "--evidence", "lookup", "--operator", "root", "--key", rootKey.path,
            ] + store)
        expect(refused, "support.schema.json", status: 1)

        // Submit answers, inspect-jws both ways.
        let lines = [
            Fixtures.line(["type": "purchase", "account": "s-uid", "transaction": Fixtures.transaction("9001", at: Fixtures.start), "id": 7]),
            Fixtures.line(["type": "delete-account", "account": "s-uid"]), "{\"type\": \"bogus\"}",
        ]
        expect(try run(["submit", "--trust-decoded"] + store, stdin: lines.joined(separator: "\n") + "\n"), "submit.schema.json")
        let jws = directory.path("t.jws").path
        try Data(try ReleaseEvidenceTests.sign(Fixtures.transaction("9002", at: Fixtures.start)).utf8).write(to: URL(fileURLWithPath: jws))
        expect(try run(["inspect-jws", jws, "--at", String(Fixtures.start)] + store), "inspect-jws.schema.json")
        try Data("a.b".utf8).write(to: URL(fileURLWithPath: jws))
        expect(try run(["inspect-jws", jws] + store), "inspect-jws.schema.json", status: 1)

        // A new store, an upgraded one (format-1 records in the log) and a copy.
        expect(
            try run(["init", "--store", directory.path("new").path, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]), "init.schema.json"
        )
        try FormatOneFixture.copyStore(to: directory.path("old"))
        let upgraded = directory.path("upgraded").path
        expect(try run(["upgrade", "--from", directory.path("old").path, "--to", upgraded]), "upgrade.schema.json")
        expect(try run(["log", "--store", upgraded]), "log.schema.json")
        expect(try run(["verify", "--store", upgraded]), "verify.schema.json")
        // A format-1 checkpoint: not verified alone (formatOneCopies not-checked), verified with the format-1 store.
        let formatOneCheckpoint = ["--checkpoint", FormatOneFixture.directory.appendingPathComponent("checkpoint.txt").path]
        expect(try run(["verify", "--store", upgraded] + formatOneCheckpoint), "verify.schema.json", status: 1)
        expect(
            try run(["verify", "--store", upgraded] + formatOneCheckpoint + ["--format-one-store", directory.path("old").path]), "verify.schema.json")
        expect(try run(["compact", "--store", upgraded]), "compact.schema.json")
        expect(try run(["migrate", "--from", upgraded, "--to", directory.path("copy").path]), "migrate.schema.json")
        // A backup without the keys (restore names them) and one with them.
        let (plainBackup, keyedBackup) = (directory.path("backup").path, directory.path("backup-keys").path)
        expect(try run(["backup", "--store", upgraded, "--out", plainBackup]), "backup.schema.json")
        expect(try run(["restore", "--from", plainBackup, "--to", directory.path("restored").path, "--keys", upgraded]), "restore.schema.json")
        expect(try run(["backup", "--store", upgraded, "--out", keyedBackup, "--include-keys"]), "backup.schema.json")
        expect(try run(["restore", "--from", keyedBackup, "--to", directory.path("restored-keys").path]), "restore.schema.json")
        // bench history on a few lines, bench binds on a few purchases (bench sign and serve are checked where they are run).
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: directory.path("bench.jsonl"))
        expect(
            try run(["bench", "history", "--lines", directory.path("bench.jsonl").path, "--dir", directory.path("bench").path]), "bench.schema.json")
        expect(try run(["bench", "binds", "--held", "30", "--binds", "20", "--dir", directory.path("binds").path]), "bench.schema.json")
    }

    /// Runs Tests/Independent/verify_bundle.py with `arguments`.
    static func independentVerifier(_ arguments: [String]) throws -> LedgerBinary.Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", LedgerBinary.packageRoot.appendingPathComponent("Tests/Independent/verify_bundle.py").path] + arguments
        let (out, err) = (Pipe(), Pipe())
        (process.standardOutput, process.standardError) = (out, err)
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return LedgerBinary.Result(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// docs/output.md names every command `ledger --help` lists and every schema file, and every
    /// schema file is valid for the validator (no unsupported keyword, every `$ref` resolves).
    @Test func theOutputPageCoversEveryCommandAndEverySchema() throws {
        let page = try String(contentsOf: LedgerBinary.packageRoot.appendingPathComponent("docs/output.md"), encoding: .utf8)
        let help = try LedgerBinary.run(["--help"]).stdout
        let listed = help.components(separatedBy: "Commands:\n").last?.components(separatedBy: "\n\n").first ?? ""
        let commands = listed.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
        #expect(commands.count >= 20)
        for command in commands { #expect(page.contains("| `\(command)"), "docs/output.md does not list ledger \(command)") }
        // The validator refuses what the schemas do not document: a missing field, an extra one, a wrong type.
        #expect(!schemas.problems(#"{"records": 1}"#, against: "stats.schema.json").isEmpty)
        #expect(
            !schemas.problems(
                #"{"out": "a", "records": 1, "lineage": "00112233445566778899aabbccddeeff", "bytes": 2, "x": 1}"#,
                against: "dispute-export.schema.json"
            ).isEmpty)
        #expect(
            !schemas.problems(
                #"{"out": "a", "records": "1", "lineage": "00112233445566778899aabbccddeeff", "bytes": 2}"#, against: "dispute-export.schema.json"
            ).isEmpty)
        #expect(
            schemas.problems(
                #"{"out": "a", "records": 1, "lineage": "00112233445566778899aabbccddeeff", "bytes": 2}"#, against: "dispute-export.schema.json"
            ).isEmpty)
        for name in schemas.files.keys {
            #expect(page.contains(name), "docs/output.md does not name \(name)")
            // An empty object is checked against the whole schema: only schema errors, never unsupported keywords.
            #expect(
                !schemas.problems(.object([:]), against: name).contains { $0.contains("unsupported keyword") || $0.contains("unresolved") }, "\(name)"
            )
        }
    }
}
