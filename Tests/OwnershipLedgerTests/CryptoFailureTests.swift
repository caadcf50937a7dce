import Foundation
import LedgerTestSupport
import Testing

/// A broken libcrypto, here an OpenSSL configuration whose only provider is the null provider (every algorithm
/// fetch fails), is reported as what it is, through the binary: never as a wrong key file, a damaged record or a
/// signature that does not verify, and it changes nothing. The log's hashes and the keyed identifiers use
/// libcrypto's built-in SHA-256, which no provider serves, so what needs only them still answers, the same as
/// with a working libcrypto. `verify` and every lookup of a UID unseal (AES-256-GCM) the UID sealed under the
/// pseudonym its vault entry points to, so they report the failure too, never a damaged or tampered vault.
@Suite struct CryptoFailureTests {
    let directory = TemporaryDirectory("ledger-crypto-failure")
    var store: String { directory.path("store").path }

    func brokenOpenSSL() throws -> [String: String] {
        let config = directory.path("null-provider.cnf")
        try """
        openssl_conf = openssl_init
        [openssl_init]
        providers = provider_sect
        [provider_sect]
        null = null_sect
        [null_sect]
        activate = 1

        """.write(to: config, atomically: true, encoding: .utf8)
        return ["OPENSSL_CONF": config.path]
    }

    func expectLibcryptoFailure(_ result: LedgerBinary.Result, _ command: String) {
        #expect(result.status == 3, "\(command): \(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("error: libcrypto failed: "), "\(command): \(result.stderr)")
        #expect(!result.stderr.contains("key file") && !result.stderr.contains("corrupt"), "\(command): \(result.stderr)")
        #expect(!result.stdout.contains("\"verified\":false"), "\(command): \(result.stdout)")
    }

    @Test func aStoreOpenedWithoutSHA256ReportsLibcryptoNotAWrongKeyAndChangesNothing() throws {
        defer { directory.remove() }
        #expect(try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]).status == 0)
        let purchase = Fixtures.line([
            "type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1", at: Fixtures.start), "at": Fixtures.start,
        ])
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: purchase + "\n").status == 0)
        let bundle = directory.path("bundle.json").path
        let publicKey = directory.path("signing.pub").path
        #expect(try LedgerBinary.run(["dispute", "export", "--original-transaction-id", "1", "--out", bundle, "--store", store]).status == 0)
        #expect(try LedgerBinary.run(["signing-key", "--out", publicKey, "--store", store]).status == 0)
        let before = try Data(contentsOf: directory.path("store/data.mdb"))
        let newAccount = Fixtures.line([
            "type": "purchase", "account": "bob", "transaction": Fixtures.transaction("2", at: Fixtures.start), "at": Fixtures.start,
        ])
        let hashingOnly = [(["rebuild", "--check", "--store", store], ""), (["replay", "--original-transaction-id", "1", "--store", store], "")]
        let working = try hashingOnly.map { try LedgerBinary.run($0.0, stdin: $0.1) }

        let broken = try brokenOpenSSL()
        for arguments in [
            ["binding", "--original-transaction-id", "1", "--store", store],
            ["checkpoint", "--out", directory.path("cp.txt").path, "--store", store],  // loads the Ed25519 signing key
            ["dispute", "verify", bundle, "--public-key", publicKey],
            ["verify", "--store", store], ["account", "--uid", "alice", "--store", store],
        ] {
            expectLibcryptoFailure(try LedgerBinary.run(arguments, environment: broken), arguments[0])
        }
        // A new account's pseudonym needs random bytes: the line is answered as the ledger's failure, naming the call.
        let refused = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: newAccount + "\n", environment: broken)
        #expect(refused.stdout.contains("\"code\":\"internal\""), "\(refused.stdout)")
        #expect(refused.stdout.contains("nothing was appended: RAND_bytes failed"), "\(refused.stdout)")
        #expect(!refused.stdout.contains("key file") && !refused.stdout.contains("corrupt"), "\(refused.stdout)")
        // An existing account's UID is confirmed against the UID sealed under its pseudonym: the same.
        let known = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: purchase + "\n", environment: broken)
        #expect(known.stdout.contains("nothing was appended: EVP_CIPHER_fetch(AES-256-GCM) failed"), "\(known.stdout)")
        #expect(!known.stdout.contains("tampered") && !known.stdout.contains("corrupt"), "\(known.stdout)")
        for ((arguments, input), expected) in zip(hashingOnly, working) {
            let result = try LedgerBinary.run(arguments, stdin: input, environment: broken)
            #expect(result.status == 0 && result.stdout == expected.stdout, "\(arguments[0]): \(result.stdout) \(result.stderr)")
        }
        #expect(try Data(contentsOf: directory.path("store/data.mdb")) == before)
        let verified = try LedgerBinary.run(["verify", "--store", store])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(try LedgerBinary.run(["dispute", "verify", bundle, "--public-key", publicKey]).status == 0)
    }

    @Test func initWithoutRandomBytesLeavesNoLedger() throws {
        defer { directory.remove() }
        let arguments = ["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]
        expectLibcryptoFailure(try LedgerBinary.run(arguments, environment: try brokenOpenSSL()), "init")
        #expect(!FileManager.default.fileExists(atPath: directory.path("store/ledger.key").path))
        let result = try LedgerBinary.run(arguments)
        #expect(result.status == 0, "\(result.stderr)")
    }
}
