import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// The identity vault (a UID's vault key → its pseudonym; the UID sealed under the pseudonym) is
/// outside the hash chain, so nothing in the log can tell which pseudonym a UID's entry should point
/// to. `verify` checks the entries against each other, and every lookup of a UID confirms the UID
/// sealed under the pseudonym it found: two swapped entries would otherwise move a subscription
/// between accounts with the store reported intact (review 27, H1). On both engines
/// (`LEDGER_TEST_STORE=postgres`).
@Suite struct IdentityVaultTests {
    let t = Fixtures.start
    let day = Fixtures.day
    /// Distinctive UIDs, so that a search of any output for them finds only a real leak.
    let alice = "vault-alice-Q7fR2mXw9k"
    let bob = "vault-bob-Lc83ZpTe0v"
    let carol = "vault-carol-Hd51NqYb6s"

    @discardableResult
    func send(_ submit: SubmitProtocol, _ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }

    /// alice buys lineage "1", bob lineage "2", carol lineage "3".
    func populatedLedger() throws -> (Ledger, TemporaryDirectory, SubmitProtocol) {
        let (ledger, directory) = try Fixtures.ledger()
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        for (index, uid) in [alice, bob, carol].enumerated() {
            let answer = send(submit, ["type": "purchase", "account": uid, "transaction": Fixtures.transaction("\(index + 1)", at: t), "at": t])
            #expect(answer["decision"] as? String == "granted", "\(answer)")
        }
        return (ledger, directory, submit)
    }

    /// The pseudonym and the sealed UID of `uid`'s account, as stored.
    static func identity(_ store: LedgerStore, _ uid: String) throws -> (vaultKey: Key128, account: AccountID, sealed: [UInt8]) {
        try store.read { reader in
            let account = try #require(try store.pseudonym(ofUID: uid, in: reader))
            return (try store.keys.vaultKey(uid: uid), account, try #require(try reader.sealedUID(of: account)))
        }
    }

    /// Rewrites vault entries below the ledger, as someone with write access to the store could:
    /// each of `entries` makes `uid`'s vault key point to `account`, and stores `sealed` under
    /// `account` (in place of what was there). Nothing else changes: no record, no other entry.
    static func rewriteVault(_ store: LedgerStore, _ entries: [(uid: String, account: AccountID, sealed: [UInt8])]) throws {
        let vaultKeys = try entries.map { try store.keys.vaultKey(uid: $0.uid) }
        try store.write { _, writer in
            var batch = EngineBatch()
            batch.vaultInserts = zip(vaultKeys, entries).map { ($0, $1.account, $1.sealed) }
            try writer.apply(batch)
        }
    }

    /// Swaps the vault entries of UIDs `a` and `b` (each sealed UID stays under its own pseudonym):
    /// `a` now points to `b`'s account and `b` to `a`'s, the review's H1.
    static func swapVaultEntries(_ store: LedgerStore, _ a: String, _ b: String) throws {
        let (first, second) = (try identity(store, a), try identity(store, b))
        try rewriteVault(store, [(a, second.account, second.sealed), (b, first.account, first.sealed)])
    }

    static let swapped =
        "the vault entry pointing to it is not its UID's (the UID sealed under it has another vault key): entries swapped, copied or changed"
    static let moved =
        "its sealed UID does not unseal with this store's key under this pseudonym (damaged, replaced, or moved from another pseudonym)"
    static func pointsElsewhere(_ other: AccountID) -> String {
        "the vault entry of the UID sealed under it points to another pseudonym, \(other)"
    }

    /// `ledger verify` on the store, through the binary.
    func verify(_ ledger: Ledger) throws -> LedgerBinary.Result {
        try LedgerBinary.run(["verify"] + ledger.store.location.arguments)
    }

    // MARK: Verify

    @Test func verifyReportsTwoSwappedVaultEntriesNamingTheirPseudonyms() throws {
        let (ledger, directory, _) = try populatedLedger()
        defer { directory.remove() }
        #expect(try ledger.store.replay().vaultDifferences == [])
        let (a, b) = (try Self.identity(ledger.store, alice).account, try Self.identity(ledger.store, bob).account)
        try Self.swapVaultEntries(ledger.store, alice, bob)

        let expected: Set<String> = [
            "pseudonym \(a): \(Self.swapped)", "pseudonym \(b): \(Self.swapped)",
            "pseudonym \(a): \(Self.pointsElsewhere(b))", "pseudonym \(b): \(Self.pointsElsewhere(a))",
        ]
        let report = try ledger.store.replay()
        #expect(!report.isIntact)
        #expect(report.chainFault == nil && report.violations == [] && report.readModelDifferences == [] && report.indexDifferences == [])
        #expect(Set(report.vaultDifferences) == expected && report.vaultDifferences.count == 4, "\(report.vaultDifferences)")

        let verified = try verify(ledger)
        #expect(verified.status == 1, "\(verified.stdout) \(verified.stderr)")
        #expect(verified.json["intact"] as? Bool == false)
        #expect(Set(verified.json["vaultDifferences"] as? [String] ?? []) == expected, "\(verified.stdout)")
        for uid in [alice, bob] { #expect(!(verified.stdout + verified.stderr).contains(uid), "verify names a pseudonym, never a UID") }
        // A check, not a repair: rebuild does not touch the vault, and verify still fails after it.
        #expect(try LedgerBinary.run(["rebuild"] + ledger.store.location.arguments).status == 0)
        #expect(try verify(ledger).status == 1)
    }

    /// On a terminal `verify` shows its progress on standard error: the log's records, then the accounts
    /// the vault check has checked (`script` runs it on a pseudo-terminal and copies what it shows).
    @Test func verifyOnATerminalShowsTheRecordsThenTheVaultsAccounts() throws {
        let (ledger, directory, _) = try populatedLedger()
        defer { directory.remove() }
        let command = ([LedgerBinary.url.path, "verify"] + ledger.store.location.arguments).map { "'\($0)'" }.joined(separator: " ")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-q", "-e", "-c", command, "/dev/null"]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let shown = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(shown)")
        #expect(shown.contains("verify: 3/3 records (100%)"), "\(shown)")
        #expect(shown.contains("verify: identity vault: 3/3 accounts (100%)"), "\(shown)")
        #expect(try verify(ledger).stderr.isEmpty, "no progress when standard error is not a terminal")
    }

    /// `verify` checks the vault entries in two halves of the vault keys, the upper half on a second
    /// thread: entries swapped in both halves are each named once, the first step's findings in
    /// vault-key order as one walk would list them, and nothing else is.
    @Test func bothHalvesOfTheVaultAreCheckedAndListedInVaultKeyOrder() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let uids = (0..<24).map { "vault-split-\($0)-Wq4Zr8" }
        for (index, uid) in uids.enumerated() {
            send(submit, ["type": "purchase", "account": uid, "transaction": Fixtures.transaction("\(index + 100)", at: t), "at": t])
        }
        #expect(try ledger.store.replay().vaultDifferences == [])
        let middle = Key128(high: 1 << 63, low: 0)
        let keyed = try uids.map { (uid: $0, vaultKey: try ledger.store.keys.vaultKey(uid: $0)) }
        let lower = keyed.filter { $0.vaultKey < middle }.prefix(2).map(\.uid)
        let upper = keyed.filter { $0.vaultKey >= middle }.prefix(2).map(\.uid)
        try #require(lower.count == 2 && upper.count == 2)
        // Each swapped UID with its own pseudonym and its partner's, which its entry then points to.
        let swaps = try [(lower[0], lower[1]), (lower[1], lower[0]), (upper[0], upper[1]), (upper[1], upper[0])].map {
            (
                vaultKey: try ledger.store.keys.vaultKey(uid: $0.0), own: try Self.identity(ledger.store, $0.0).account,
                partner: try Self.identity(ledger.store, $0.1).account
            )
        }
        try Self.swapVaultEntries(ledger.store, lower[0], lower[1])
        try Self.swapVaultEntries(ledger.store, upper[0], upper[1])
        let differences = try ledger.store.replay().vaultDifferences
        // The first step names the pseudonym each entry points to, in vault-key order; the third each
        // sealed UID whose UID's entry points elsewhere.
        #expect(Array(differences.prefix(4)) == swaps.sorted { $0.vaultKey < $1.vaultKey }.map { "pseudonym \($0.partner): \(Self.swapped)" })
        #expect(Set(differences.dropFirst(4)) == Set(swaps.map { "pseudonym \($0.own): \(Self.pointsElsewhere($0.partner))" }), "\(differences)")
        #expect(differences.count == 8)
    }

    /// Each kind of vault damage `rewriteVault` can make is named, with the pseudonyms it concerns.
    @Test func verifyNamesACopiedEntryAnAlienSealedUIDAndOneThatDoesNotUnseal() throws {
        // bob's entry points to alice's account (copied): bob's own account is left with no entry pointing to it.
        do {
            let (ledger, directory, _) = try populatedLedger()
            defer { directory.remove() }
            let (a, b) = (try Self.identity(ledger.store, alice), try Self.identity(ledger.store, bob))
            try Self.rewriteVault(ledger.store, [(bob, a.account, a.sealed)])
            #expect(
                Set(try ledger.store.replay().vaultDifferences) == [
                    "pseudonym \(a.account): \(Self.swapped)", "pseudonym \(b.account): \(Self.pointsElsewhere(a.account))",
                ])
        }
        // alice's account holds bob's sealed UID, which is bound to bob's pseudonym: it does not unseal under alice's.
        do {
            let (ledger, directory, _) = try populatedLedger()
            defer { directory.remove() }
            let (a, b) = (try Self.identity(ledger.store, alice), try Self.identity(ledger.store, bob))
            try Self.rewriteVault(ledger.store, [(alice, a.account, b.sealed)])
            #expect(try ledger.store.replay().vaultDifferences == ["pseudonym \(a.account): \(Self.moved)"])
        }
        // Bytes that do not unseal under alice's account.
        do {
            let (ledger, directory, _) = try populatedLedger()
            defer { directory.remove() }
            let a = try Self.identity(ledger.store, alice)
            var damaged = a.sealed
            damaged[damaged.count - 1] ^= 1
            try Self.rewriteVault(ledger.store, [(alice, a.account, damaged)])
            #expect(
                try ledger.store.replay().vaultDifferences == ["pseudonym \(a.account): \(Self.moved)"])
            let verified = try verify(ledger)
            #expect(verified.status == 1 && verified.json["intact"] as? Bool == false, "\(verified.stdout) \(verified.stderr)")
        }
    }

    /// Deletions (the entry and the sealed UID erased together), a UID used again after its deletion
    /// (a new account), a deletion and a new account of the same UID in one write group, and a
    /// support transfer to a new account all leave a vault that verifies.
    @Test func legitimateHistoriesKeepTheVaultConsistent() throws {
        let staffed = try StaffedLedger("vault-legitimate")
        let (ledger, directory, submit) = (staffed.ledger, staffed.directory, staffed.submit)
        defer { directory.remove() }
        for (index, uid) in [alice, bob, carol, "vault-dave-Pw42Ks"].enumerated() {
            let answer = send(submit, ["type": "purchase", "account": uid, "transaction": Fixtures.transaction("\(index + 1)", at: t), "at": t])
            #expect(answer["decision"] as? String == "granted", "\(answer)")
        }
        let carolBefore = try #require(try ledger.pseudonym(ofUID: carol))
        #expect(send(submit, ["type": "delete-account", "account": carol, "at": t + day])["decision"] as? String == "recorded")
        #expect(try ledger.pseudonym(ofUID: carol) == nil)
        let again = send(
            submit, ["type": "purchase", "account": carol, "transaction": Fixtures.transaction("5", at: t + 2 * day), "at": t + 2 * day])
        #expect(again["decision"] as? String == "granted", "\(again)")
        #expect(try ledger.pseudonym(ofUID: carol) != carolBefore, "a UID used again after its deletion is a new account")
        // dave deleted and back in one write group; erin deleted before she ever existed.
        let payload = try Fixtures.payload(Fixtures.transaction("6", at: t + 3 * day))
        _ = try ledger.submit(groups: [
            ([.deleteAccount(uid: "vault-dave-Pw42Ks")], t + 3 * day),
            ([.transaction(.purchase, uid: "vault-dave-Pw42Ks", payload, .trustedDecoded)], t + 3 * day),
            ([.deleteAccount(uid: "vault-erin-Ua09Rt")], t + 3 * day),
        ])
        #expect(try ledger.account(uid: "vault-dave-Pw42Ks").entitlements.filter(\.active).count == 1)
        // Support moves alice's lineage 1 to frank, a UID that had no account yet.
        let request = try ledger.requestTransfer(
            TransferRequestInput(
                caseId: "case-A", reason: "customer lost access to the Apple-linked account", originalTransactionId: "1",
                targetUID: "vault-frank-Zm18Gd", targetAuthentication: "firebase re-auth", ownershipEvidence: "Apple order id looked up"),
            operator: "olivia", key: staffed.olivia, at: t + 4 * day)
        #expect(request.accepted, "\(request.refusalReason ?? "")")
        #expect(try ledger.approveReviewed(caseId: "case-A", approver: "adam", key: staffed.adam, at: t + 4 * day).accepted)
        let applied = try ledger.applyTransfer(caseId: "case-A", staff: "olivia", key: staffed.olivia, at: t + 4 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        let restore = send(
            submit, ["type": "restore", "account": "vault-frank-Zm18Gd", "transaction": Fixtures.transaction("1", at: t), "at": t + 5 * day])
        #expect(restore["decision"] as? String == "granted", "\(restore)")

        let report = try ledger.store.replay()
        #expect(report.isIntact, "\(report.vaultDifferences) \(report.violations)")
        #expect(report.vaultDifferences == [])
        let verified = try verify(ledger)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(verified.json["vaultDifferences"] as? [String] == [])
    }

    /// The bypass of session 27: both vault entries *and* both sealed UIDs swapped, so that every
    /// entry is consistent with the UID sealed under the pseudonym it points to, and alice's UID
    /// would answer for bob's account. The seals are bound to their pseudonyms: a sealed UID moved
    /// under another pseudonym does not unseal there. `verify` names both pseudonyms (library and
    /// binary) and every lookup of either UID refuses.
    @Test func verifyAndLookupsCatchEntriesSwappedTogetherWithTheirSealedUIDs() throws {
        let (ledger, directory, submit) = try populatedLedger()
        defer { directory.remove() }
        let (a, b) = (try Self.identity(ledger.store, alice), try Self.identity(ledger.store, bob))
        try Self.rewriteVault(ledger.store, [(alice, b.account, a.sealed), (bob, a.account, b.sealed)])

        let expected: Set<String> = ["pseudonym \(a.account): \(Self.moved)", "pseudonym \(b.account): \(Self.moved)"]
        let report = try ledger.store.replay()
        #expect(!report.isIntact)
        #expect(Set(report.vaultDifferences) == expected && report.vaultDifferences.count == 2, "\(report.vaultDifferences)")
        let verified = try verify(ledger)
        #expect(verified.status == 1, "\(verified.stdout) \(verified.stderr)")
        #expect(Set(verified.json["vaultDifferences"] as? [String] ?? []) == expected, "\(verified.stdout)")
        for uid in [alice, bob] { #expect(!(verified.stdout + verified.stderr).contains(uid)) }

        for uid in [alice, bob] {
            #expect(throws: (any Error).self, "\(uid)") { try ledger.account(uid: uid) }
            let result = try LedgerBinary.run(["account", "--uid", uid] + ledger.store.location.arguments)
            #expect(result.status == 3 && result.stdout.isEmpty, "\(uid): \(result.stdout) \(result.stderr)")
            #expect(result.stderr.contains("run `ledger verify`"), "\(result.stderr)")
        }
        let head = try ledger.store.head().sequence
        let answer = send(submit, ["type": "restore", "account": alice, "transaction": Fixtures.transaction("2", at: t), "at": t + day])
        #expect(answer["code"] as? String == "internal", "alice may not restore bob's lineage through the moved vault: \(answer)")
        #expect(try ledger.store.head().sequence == head)
    }

    /// Rewrites `uid`'s sealed UID as builds up to session 27 sealed it: without associated data
    /// (``SealedUID/legacy``), the bound one erased.
    static func sealAsLegacy(_ store: LedgerStore, _ uid: String) throws {
        let identity = try identity(store, uid)
        let legacy = [SealedUID.legacy] + (try SealedBox.seal(Array(uid.utf8), key: store.keys.sealKey))
        try store.write { _, writer in
            var batch = EngineBatch()
            batch.vaultErasures = [(identity.vaultKey, identity.account)]
            batch.vaultInserts = [(identity.vaultKey, identity.account, legacy)]
            try writer.apply(batch)
        }
    }

    /// UIDs sealed before seals were bound (no associated data) still open, look up and verify;
    /// `verify` counts them (`legacySealedUIDs`). What remains: two legacy seals swapped with their
    /// entries are consistent and pass; a legacy seal moved under a bound one's pseudonym does not.
    @Test func legacySealsStillOpenAndVerifyAndAreCounted() throws {
        let (ledger, directory, submit) = try populatedLedger()
        defer { directory.remove() }
        for uid in [alice, bob] { try Self.sealAsLegacy(ledger.store, uid) }
        let (a, b, c) = (try Self.identity(ledger.store, alice), try Self.identity(ledger.store, bob), try Self.identity(ledger.store, carol))
        #expect(a.sealed.first == SealedUID.legacy && b.sealed.first == SealedUID.legacy && c.sealed.first == SealedUID.bound)
        let report = try ledger.store.replay()
        #expect(report.isIntact && report.legacySealedUIDs == 2, "\(report.vaultDifferences)")
        let verified = try verify(ledger)
        #expect(verified.status == 0 && verified.json["legacySealedUIDs"] as? Int == 2, "\(verified.stdout) \(verified.stderr)")
        #expect(try ledger.account(uid: alice).entitlements.filter(\.active).count == 1)
        #expect(try ledger.binding(originalTransactionId: "2").uid == bob)
        let answer = send(submit, ["type": "restore", "account": alice, "transaction": Fixtures.transaction("1", at: t), "at": t + day])
        #expect(answer["decision"] as? String == "granted", "\(answer)")
        #expect(try LedgerBinary.run(["account", "--uid", bob] + ledger.store.location.arguments).status == 0)

        // Two legacy seals moved with their entries: not detectable (docs/storage-format.md).
        try Self.rewriteVault(ledger.store, [(alice, b.account, a.sealed), (bob, a.account, b.sealed)])
        #expect(try ledger.store.replay().vaultDifferences == [])
        try Self.rewriteVault(ledger.store, [(alice, a.account, a.sealed), (bob, b.account, b.sealed)])
        // A legacy seal and carol's bound one swapped with their entries: carol's fails under alice's pseudonym.
        try Self.rewriteVault(ledger.store, [(alice, c.account, a.sealed), (carol, a.account, c.sealed)])
        let differences = try ledger.store.replay().vaultDifferences
        #expect(differences.contains { $0.hasPrefix("pseudonym \(a.account): its sealed UID does not unseal") }, "\(differences)")
        #expect(throws: (any Error).self) { try ledger.account(uid: carol) }
    }

    // MARK: Lookups

    /// With two vault entries swapped, every lookup of either UID refuses (exit 3 through the binary)
    /// instead of answering for the other's account; nothing is appended; other UIDs still decide.
    @Test func queriesAndSubmitsRefuseASwappedVault() throws {
        let (ledger, directory, submit) = try populatedLedger()
        defer { directory.remove() }
        try Self.swapVaultEntries(ledger.store, alice, bob)
        let store = ledger.store.location.arguments

        for uid in [alice, bob] {
            do {
                let view = try ledger.account(uid: uid)
                Issue.record("account answered for \(uid): \(view)")
            } catch {
                #expect("\(error)".contains("run `ledger verify`"), "\(error)")
            }
            #expect(throws: (any Error).self) { try ledger.explain(uid: uid, originalTransactionId: "1", at: t) }
        }
        let refusals: [[String]] = [
            ["account", "--uid", bob], ["account", "--uid", alice], ["explain", "--uid", bob, "--original-transaction-id", "1"],
            ["dispute", "export", "--original-transaction-id", "1", "--uid", bob, "--out", directory.path("bob.json").path],
        ]
        for arguments in refusals {
            let result = try LedgerBinary.run(arguments + store)
            #expect(result.status == 3, "\(arguments): \(result.stdout) \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
            #expect(result.stderr.contains("tampered") && result.stderr.contains("run `ledger verify`"), "\(arguments): \(result.stderr)")
            for uid in [alice, bob] { #expect(!result.stderr.contains(uid)) }
        }
        #expect(!FileManager.default.fileExists(atPath: directory.path("bob.json").path), "no bundle is signed")
        // binding reads the sealed UID of the lineage's account: still alice, as the log says.
        #expect(try ledger.binding(originalTransactionId: "1").uid == alice)

        // Submits: bob's restore of alice's lineage and alice's own are refused, nothing appended.
        let head = try ledger.store.head().sequence
        for uid in [bob, alice] {
            let answer = send(submit, ["type": "restore", "account": uid, "transaction": Fixtures.transaction("1", at: t), "at": t + day])
            #expect(answer["decision"] as? String == "invalid" && answer["code"] as? String == "internal", "\(answer)")
            #expect((answer["message"] as? String ?? "").contains("run `ledger verify`"), "\(answer)")
        }
        let lines = [bob, alice].map { uid in
            Fixtures.line(["type": "restore", "account": uid, "transaction": Fixtures.transaction("1", at: t), "at": t + day])
        }
        let submitted = try LedgerBinary.run(["submit", "--trust-decoded"] + store, stdin: lines.joined(separator: "\n") + "\n")
        let answers = submitted.lines.map(Fixtures.object)
        #expect(answers.count == 2 && answers.allSatisfy { $0["code"] as? String == "internal" }, "\(submitted.stdout) \(submitted.stderr)")
        #expect(try ledger.store.head().sequence == head, "nothing appended")
        // carol's entry is intact: she still decides.
        let carols = send(submit, ["type": "restore", "account": carol, "transaction": Fixtures.transaction("3", at: t), "at": t + day])
        #expect(carols["decision"] as? String == "granted", "\(carols)")
    }
}
