import Foundation
import LedgerCore
import LedgerStore
import OwnershipLedger

struct DemoCommand: Subcommand {
    static let name = "demo"
    static let abstract = "Run the binding contract's scenarios against a demonstration store."
    static let usage = """
        Usage: ledger demo [--store DIR]

        Creates a demonstration ledger in DIR (default ./ledger-data; an existing demonstration store there
        is replaced, any other existing ledger is left alone and the demo refuses) for bundle
        com.myrecipes.app in Sandbox, then runs the contract's scenarios through the same verifier protocol
        as `ledger submit --trust-decoded`: Device A purchase and Device B restore, same-device account
        switch, deletion with active Apple billing, Family Sharing, duplicate notification delivery, a
        two-person support recovery after the deletion, and the disputed lineage's replay, explanation and
        offline-verified dispute bundle. It prints each decision, then verifies the hash chain and every
        invariant. Afterwards, query the store:
        `ledger account --uid alice`, `ledger binding --original-transaction-id 2000000000000001`, `ledger log`.
        """
    static let options: Set<String> = []
    static let marker = ".ledger-demo"

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        // The demonstration's keys are throwaway: they stay in its directory, never in a key directory.
        if arguments.value("keys") != nil { throw CLIError.usage("the demo keeps its throwaway keys in its store directory: drop --keys") }
        let directory = try arguments.storeDirectory("demo", alternative: "run the demo in a directory and copy it with `ledger migrate`").store
        let fm = FileManager.default
        if fm.fileExists(atPath: directory.appendingPathComponent("data.mdb").path) {
            guard fm.fileExists(atPath: directory.appendingPathComponent(marker).path) else {
                throw CLIError(
                    code: .storeError,
                    message: "\(directory.path) holds a ledger that is not a demonstration; run the demo with --store OTHER_DIR")
            }
            try fm.removeItem(at: directory)
        }
        let ledger = try Ledger.initialize(
            at: .directory(directory), configuration: LedgerConfiguration(bundleId: "com.myrecipes.app", environment: .sandbox))
        _ = fm.createFile(atPath: directory.appendingPathComponent(marker).path, contents: Data())
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let demo = DemoScript(console: console, submit: submit, ledger: ledger)
        try demo.run()
        try ForensicsDemo.run(ledger: ledger, directory: directory, console: console)
        let report = try ledger.store.replay()
        console.out("")
        console.out(
            "ledger verify: \(report.verifiedRecords) records, hash chain \(report.chainFault == nil ? "intact" : "BROKEN"), \(report.violations.count) invariant violations, \(report.readModelDifferences.count) read-model differences, \(report.indexDifferences.count) index differences"
        )
        console.out("Store: \(directory.path). Try: ledger account --uid alice --store \(directory.path)")
        return report.isIntact ? .success : .verificationFailed
    }
}

/// The scenarios of the binding contract, as protocol lines.
struct DemoScript {
    let console: Console
    let submit: SubmitProtocol
    let ledger: Ledger

    static let day: Int64 = 86_400_000
    /// The business times of the scenarios start now (to the second), so queries at those times
    /// see what the ledger recorded (every point-in-time query cuts on the ledger's own clock).
    let start: Int64 = LedgerTime.now() / 1000 * 1000

    func transaction(_ otid: String, _ tid: String, at: Int64, ownership: String = "PURCHASED") -> [String: Any] {
        [
            "originalTransactionId": otid, "transactionId": tid, "productId": "com.myrecipes.premium.monthly",
            "bundleId": "com.myrecipes.app", "purchaseDate": at, "expiresDate": at + 30 * Self.day,
            "inAppOwnershipType": ownership, "environment": "Sandbox", "signedDate": at,
        ]
    }

    @discardableResult
    func step(_ title: String, _ line: [String: Any]) -> [String: Any] {
        let request = JSONLine.render(line)
        let response = submit.respond(to: request)
        let object = (try? JSONSerialization.jsonObject(with: Data(response.utf8))) as? [String: Any] ?? [:]
        let decision = "\(object["decision"] ?? "?") (\(object["code"] ?? "?"))"
        console.out("  \(title.padding(toLength: 58, withPad: " ", startingAt: 0)) → \(decision)")
        console.out("      \(response)")
        return object
    }

    func query(_ uid: String, at: Int64) throws {
        let view = try ledger.account(uid: uid, at: at)
        let active = view.entitlements.filter(\.active).map(\.productId)
        console.out("  account \(uid): \(active.isEmpty ? "no active entitlement" : "entitled to " + active.joined(separator: ", "))")
    }

    func run() throws {
        let t = start
        let a = "2000000000000001"
        console.out("1. Device A purchase, Device B restore (same MyRecipes account)")
        step("alice buys on Device A", ["type": "purchase", "account": "alice", "transaction": transaction(a, a, at: t), "at": t])
        step(
            "alice restores on Device B",
            ["type": "restore", "account": "alice", "transaction": transaction(a, a, at: t + 3_600_000), "at": t + 3_600_000])
        console.out("2. Same-device account switch")
        step(
            "bob signs in on Device A and restores",
            ["type": "restore", "account": "bob", "transaction": transaction(a, a, at: t + 7_200_000), "at": t + 7_200_000])
        try query("alice", at: t + 7_200_000)
        try query("bob", at: t + 7_200_000)
        console.out("3. Renewal notification and a duplicate delivery")
        let renewal: [String: Any] = [
            "notificationType": "DID_RENEW", "notificationUUID": "6f1c1c2e-demo-renewal", "signedDate": t + 30 * Self.day,
            "data": [
                "environment": "Sandbox", "bundleId": "com.myrecipes.app", "transaction": transaction(a, "2000000000000101", at: t + 30 * Self.day),
            ],
        ]
        step("App Store: DID_RENEW", ["type": "notification", "notification": renewal, "at": t + 30 * Self.day])
        step("App Store retries the same notification", ["type": "notification", "notification": renewal, "at": t + 30 * Self.day + 60_000])
        console.out("4. Deletion with active Apple billing")
        let c = "2000000000000002"
        step("carol buys", ["type": "purchase", "account": "carol", "transaction": transaction(c, c, at: t), "at": t])
        step("carol deletes her MyRecipes account", ["type": "delete-account", "account": "carol", "at": t + Self.day])
        let tombstoneRenewal: [String: Any] = [
            "notificationType": "DID_RENEW", "notificationUUID": "0b7d-demo-tombstone-renewal", "signedDate": t + 30 * Self.day,
            "data": [
                "environment": "Sandbox", "bundleId": "com.myrecipes.app", "transaction": transaction(c, "2000000000000202", at: t + 30 * Self.day),
            ],
        ]
        step(
            "Apple keeps billing: DID_RENEW for the deleted binding",
            ["type": "notification", "notification": tombstoneRenewal, "at": t + 30 * Self.day])
        step(
            "carol2 (a new account) restores the purchase",
            [
                "type": "restore", "account": "carol2", "transaction": transaction(c, "2000000000000202", at: t + 31 * Self.day),
                "at": t + 31 * Self.day,
            ])
        console.out("5. Family Sharing")
        let f = "2000000000000003"
        step(
            "erin restores a FAMILY_SHARED purchase",
            ["type": "restore", "account": "erin", "transaction": transaction(f, f, at: t, ownership: "FAMILY_SHARED"), "at": t])
        console.out("6. Bad input appends nothing")
        step("a malformed line", ["type": "purchase", "account": "alice", "deviceId": "A-1234"])
        try supportRecoveryAfterDeletion(originalTransactionId: c, at: t + 32 * Self.day)
    }
}
