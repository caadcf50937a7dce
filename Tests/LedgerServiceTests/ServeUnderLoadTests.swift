import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `ledger serve` under concurrent clients, overload, slow or oversized bodies, SIGTERM and kill -9.
@Suite struct ServeUnderLoadTests {
    /// One client request's outcome: the status (nil when the connection failed) and when it ended.
    struct Outcome: Sendable {
        var status: Int?
        var decision: String?
        var finished: Date
        var retryAfter: String?
    }

    static func purchase(_ served: ServedLedger, uid: String, jws: String) -> Outcome {
        do {
            let answer = try served.transaction("purchase", as: uid, jws)
            return Outcome(
                status: answer.status, decision: answer.json["decision"] as? String, finished: Date(), retryAfter: answer.headers["retry-after"])
        } catch {
            return Outcome(status: nil, decision: nil, finished: Date(), retryAfter: nil)
        }
    }

    @Test func sixtyFourClientsRacingToBuyOneNewLineageLeaveExactlyOneOwner() throws {
        let served = try ServedLedger(connections: 64)
        let jws = try ServedLedger.signedTransaction("9100")
        let outcomes = concurrently(64) { index in Self.purchase(served, uid: "racer-\(index)", jws: jws) }
        #expect(outcomes.filter { $0.status == 200 && $0.decision == "granted" }.count == 1)
        #expect(outcomes.filter { $0.status == 403 && $0.decision == "denied" }.count == 63)
        let ledger = try served.ledger()
        let owner = try #require(try ledger.binding(originalTransactionId: "9100").uid)
        #expect(owner.hasPrefix("racer-"))
        #expect(try (0..<64).filter { try ledger.account(uid: "racer-\($0)").entitlements.count == 1 } == [Int(owner.dropFirst(6)) ?? -1])
        #expect(try ledger.store.replay().isIntact)
    }

    /// 32 clients buying distinct lineages, each as fast as it is answered, until `stop` is set.
    final class Hammer: @unchecked Sendable {
        let served: ServedLedger
        let lock = NSLock()
        var stopped = false
        var answered: [(otid: String, uid: String, outcome: Outcome)] = []
        let jws: [[String]]

        init(_ served: ServedLedger, clients: Int, perClient: Int) throws {
            self.served = served
            jws = try (0..<clients).map { client in try (0..<perClient).map { try ServedLedger.signedTransaction("\(20_000 + client * 1_000 + $0)") }
            }
        }

        func run() -> Thread {
            let thread = Thread {
                _ = concurrently(self.jws.count) { client in
                    for (index, jws) in self.jws[client].enumerated() {
                        if self.lock.withLock({ self.stopped }) { return }
                        let uid = "buyer-\(client)"
                        let outcome = ServeUnderLoadTests.purchase(self.served, uid: uid, jws: jws)
                        self.lock.withLock { self.answered.append(("\(20_000 + client * 1_000 + index)", uid, outcome)) }
                        if outcome.status == nil { return }
                    }
                }
                self.lock.withLock { self.stopped = true }
            }
            thread.start()
            return thread
        }

        func waitFor(answers count: Int) {
            let deadline = Date().addingTimeInterval(30)
            while lock.withLock({ answered.count < count && !stopped }) && Date() < deadline { usleep(2_000) }
        }

        func waitUntilDone() {
            let deadline = Date().addingTimeInterval(30)
            while lock.withLock({ !stopped }) && Date() < deadline {
                // Stop sending once the server is gone; clients finish their request in flight.
                if !served.process.isRunning { lock.withLock { stopped = true } }
                usleep(2_000)
            }
            usleep(200_000)
        }

        var results: [(otid: String, uid: String, outcome: Outcome)] { lock.withLock { answered } }
    }

    @Test func sigtermAnswersEveryRequestInFlightThenExitsZeroAndEveryAnswerIsDurable() throws {
        let served = try ServedLedger(connections: 32)
        let hammer = try Hammer(served, clients: 32, perClient: 40)
        _ = hammer.run()
        hammer.waitFor(answers: 64)
        let signalled = Date()
        #expect(served.stop(SIGTERM) == 0, "\(served.log.suffix(500))")
        hammer.waitUntilDone()
        let results = hammer.results
        let granted = results.filter { $0.outcome.status == 200 }
        #expect(granted.count >= 64)
        #expect(
            granted.contains { $0.outcome.finished > signalled },
            "no request was in flight at SIGTERM: nothing to show it was answered")
        // Refused ones were refused cleanly: 503 with Retry-After, or no connection at all.
        for refused in results where refused.outcome.status != 200 {
            #expect(refused.outcome.status == nil || (refused.outcome.status == 503 && refused.outcome.retryAfter != nil), "\(refused.outcome)")
        }
        let ledger = try served.ledger()
        for answer in granted { #expect(try ledger.binding(originalTransactionId: answer.otid).uid == answer.uid) }
        #expect(try ledger.store.replay().isIntact)
        #expect(served.log.contains("\"event\":\"stopped\""))
    }

    @Test func killNineLosesNoAcknowledgedDecision() throws {
        let served = try ServedLedger(connections: 32)
        let hammer = try Hammer(served, clients: 32, perClient: 40)
        _ = hammer.run()
        hammer.waitFor(answers: 200)
        served.stop(SIGKILL)
        hammer.waitUntilDone()
        let granted = hammer.results.filter { $0.outcome.status == 200 }
        #expect(granted.count >= 200)
        let ledger = try served.ledger()
        for answer in granted { #expect(try ledger.binding(originalTransactionId: answer.otid).uid == answer.uid, "answered but lost") }
        #expect(try ledger.store.replay().isIntact)
    }

    @Test func aFullWriterQueueIs503WithRetryAfterAndAppendsNothing() throws {
        let served = try ServedLedger(["--queue", "1"], connections: 64)
        let jws = try (0..<64).map { try ServedLedger.signedTransaction("\(11_000 + $0)") }
        let outcomes = concurrently(64) { index in Self.purchase(served, uid: "crowd-\(index)", jws: jws[index]) }
        let refused = (0..<64).filter { outcomes[$0].status == 503 }
        #expect(!refused.isEmpty, "64 clients never filled a queue of 1")
        #expect(refused.allSatisfy { outcomes[$0].retryAfter != nil })
        #expect((0..<64).allSatisfy { outcomes[$0].status == 200 || outcomes[$0].status == 503 })
        let ledger = try served.ledger()
        for index in 0..<64 {
            #expect(try ledger.binding(originalTransactionId: "\(11_000 + index)").state == (refused.contains(index) ? "unbound" : "bound"))
        }
    }

    @Test func oversizedAndSlowBodiesAreRefusedWhileOthersAreServed() throws {
        let served = try ServedLedger(["--idle-timeout", "1", "--body-timeout", "1"])
        let headers = try served.authorization("gil-uid")
        let big = Fixtures.line(["type": "purchase", "signedTransaction": String(repeating: "a", count: 300_000)])
        let tooBig = try served.client.post("/v1/transactions", big, headers: headers)
        #expect(tooBig.status == 413 && tooBig.json["code"] as? String == "payload-too-large")
        // Over the server's limit: refused on the headers, before the body is read.
        let huge = try RawConnection(port: served.port)
        huge.send("POST /v1/submit HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(ServedLedger.serviceToken)\r\nContent-Length: \(5 << 20)\r\n\r\n")
        #expect(huge.readUntilClosed(timeout: 10).text.hasPrefix("HTTP/1.1 413"))
        // A body that stalls halfway, and one that trickles in: disconnected without an answer.
        let stalled = try RawConnection(port: served.port)
        stalled.send("POST /v1/apple/notifications HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n{\"signedPayload\":\"")
        let trickling = try RawConnection(port: served.port)
        trickling.send("POST /v1/apple/notifications HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n")
        Thread { for _ in 0..<30 where trickling.send("a") { usleep(200_000) } }.start()
        #expect(try served.transaction("purchase", as: "gil-uid", try ServedLedger.signedTransaction("12100")).status == 200)
        let stalledEnd = stalled.readUntilClosed(timeout: 10)
        #expect(stalledEnd.closed && stalledEnd.text.isEmpty)
        let trickleEnd = trickling.readUntilClosed(timeout: 10)
        #expect(trickleEnd.closed && trickleEnd.text.isEmpty)
        #expect(try served.client.get("/readyz").status == 200)
    }
}
