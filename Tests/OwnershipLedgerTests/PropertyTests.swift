import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

@Suite struct PropertyTests {
    /// Thousands of seeded random commands across many accounts and lineages: after every step
    /// every invariant holds and the persisted read models equal a fresh replay.
    @Test(arguments: [1, 2, 3])
    func randomHistoriesKeepEveryInvariant(seed: UInt64) throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        var random = SeededGenerator(state: seed)
        let accounts = (0..<12).map { "uid-\($0)" }
        let lineages = (0..<8).map { "90000\($0)" }
        let types = ["SUBSCRIBED", "DID_RENEW", "EXPIRED", "REFUND", "REFUND_REVERSED", "DID_FAIL_TO_RENEW", "REVOKE"]
        var checker = InvariantChecker(signatures: .libcrypto)
        var checked: UInt64 = 0
        var outcomes: [String: Int] = [:]
        var time = Fixtures.start
        var sentNotifications: [[String: Any]] = []
        for step in 0..<1_500 {
            time += Int64.random(in: 1...(3 * Fixtures.day), using: &random)
            let otid = lineages.randomElement(using: &random) ?? "0"
            let uid = accounts.randomElement(using: &random) ?? "x"
            let ownership = Int.random(in: 0..<15, using: &random) == 0 ? "FAMILY_SHARED" : "PURCHASED"
            let tid = "\(otid)\(10_000 + step)"
            let transaction = Fixtures.transaction(otid, transactionId: tid, at: time, ownership: ownership)
            let line: [String: Any]
            switch Int.random(in: 0..<10, using: &random) {
            case 0...2: line = ["type": "purchase", "account": uid, "transaction": transaction, "at": time]
            case 3...4: line = ["type": "restore", "account": uid, "transaction": transaction, "at": time]
            case 5: line = ["type": "renewal", "account": uid, "transaction": transaction, "at": time]
            case 6...8:
                if let earlier = sentNotifications.randomElement(using: &random), Int.random(in: 0..<5, using: &random) == 0 {
                    line = earlier  // App Store redelivers a notification: same UUID, same content
                    break
                }
                let type = types.randomElement(using: &random) ?? "DID_RENEW"
                var revoked = transaction
                if type == "REFUND" || type == "REVOKE" { revoked["revocationDate"] = time }
                line = [
                    "type": "notification", "notification": Fixtures.notification(type, uuid: "n-\(step)", transaction: revoked, at: time),
                    "at": time,
                ]
                sentNotifications.append(line)
            default: line = ["type": "delete-account", "account": uid, "at": time]
            }
            let response = Fixtures.object(submit.respond(to: Fixtures.line(line)))
            let decision = response["decision"] as? String ?? "none"
            #expect(decision != "invalid", "step \(step): \(response)")
            outcomes["\(decision)/\(response["code"] ?? "")", default: 0] += 1
            if response["duplicate"] as? Bool == true { outcomes["duplicate", default: 0] += 1 }

            // Feed the new records to the checker and compare its fresh fold with the persisted models.
            for record in try ledger.store.records(from: checked + 1) { try checker.check(record) }
            checked = try ledger.store.head().sequence
            #expect(checker.violations == [], "step \(step)")
            let persisted = try ledger.persistedReadModels()
            #expect(ReadModel.entries(of: checker.state) == persisted, "read models differ after step \(step)")
            if !checker.violations.isEmpty { break }
        }
        // The histories exercised every kind of decision.
        for key in ["duplicate", "granted/ok", "denied/permission-denied", "denied/family-sharing-unsupported", "recorded/ok", "ignored/not-bound"] {
            #expect((outcomes[key] ?? 0) > 0, "no \(key) in \(outcomes)")
        }
        let report = try ledger.store.rebuildReadModels(repair: false)
        #expect(report.isIntact)
    }
}
