import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

/// A line from an authenticated caller is decided for the caller's account; a line naming an
/// account, carrying another field or asking for another type is refused and appends nothing.
@Suite struct AuthenticatedCallerTests {
    let t = Fixtures.start

    @Test func theAccountIsTheCallersAndALineNamingOneIsRefused() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let alice = SubmitProtocol.AuthenticatedCaller(account: "alice", types: ["purchase", "restore"], fields: ["type", "transaction", "at"])
        let transaction = Fixtures.transaction("600", at: t)
        let head = try ledger.store.head().sequence
        let refused: [([String: Any], String)] = [
            (["type": "purchase", "account": "mallory", "transaction": transaction], "field account is refused"),
            (["type": "purchase", "uid": "mallory", "transaction": transaction], "field uid is refused"),
            (["type": "purchase", "userId": "mallory", "transaction": transaction], "field userId is refused"),
            (["type": "purchase", "transaction": transaction, "id": 7], "unknown field id (this request takes only at, transaction, type)"),
            (["type": "delete-account"], "type delete-account is not one of purchase, restore"),
        ]
        for (object, message) in refused {
            let prepared = submit.prepare([Fixtures.line(object).utf8], caller: alice)
            #expect(prepared.groups.isEmpty)
            let answer = try #require(submit.answers(to: prepared, decided: []).first)
            #expect(answer.decision == "invalid" && answer.code == "invalid-argument")
            #expect((Fixtures.object(answer.line)["message"] as? String ?? "").hasPrefix(message), "\(answer.line)")
        }
        #expect(try ledger.store.head().sequence == head, "a refused line appended something")
        let prepared = submit.prepare([Fixtures.line(["type": "purchase", "transaction": transaction, "at": t]).utf8], caller: alice)
        let answers = submit.answers(to: prepared, decided: ledger.submit(isolating: prepared.groups))
        #expect(answers.map(\.decision) == ["granted"])
        #expect(try ledger.binding(originalTransactionId: "600").uid == "alice")
    }
}
