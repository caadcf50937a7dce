import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

/// Input that must be answered `invalid`, append nothing and never crash, through the binary.
@Suite struct HostileInputTests {
    let directory = TemporaryDirectory("ledger-hostile")
    var store: String { directory.path("store").path }
    let t = Fixtures.start

    func initStore() throws {
        let result = try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    func records() throws -> Int? { try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int }

    @Test func everyLineIsAnsweredInOrderEvenWhenOversizedOrNotUTF8() throws {
        defer { directory.remove() }
        try initStore()
        let good = Fixtures.line(["id": 1, "type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1", at: t), "at": t])
        let huge = Fixtures.line(["id": 2, "type": "purchase", "account": String(repeating: "x", count: 2 << 20)])
        var input = Data((good + "\n" + huge + "\n").utf8)
        input.append(contentsOf: [0x7B, 0x22, 0x69, 0x64, 0x22, 0x3A, 0x33, 0xFF, 0xFE, 0x7D, 0x0A])  // {"id":3<FF FE>}
        input.append(Data((Fixtures.line(["id": 4, "type": "delete-account", "account": "nobody"]) + "\n").utf8))
        let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdinData: input)
        #expect(result.status == 0, "\(result.stderr)")
        let answers = result.lines.map(Fixtures.object)
        #expect(answers.count == 4)
        #expect(answers.map { $0["decision"] as? String } == ["granted", "invalid", "invalid", "ignored"])
        #expect((answers[1]["message"] as? String)?.contains("longer than") == true)
        #expect((answers[2]["message"] as? String)?.contains("not valid UTF-8") == true)
        #expect(answers[3]["id"] as? Int == 4)
        #expect(try records() == 1, "one record: the purchase (the deletion of an unknown account records nothing)")
    }

    @Test(arguments: [
        (#""at":1e300"#, "at must be"),
        (#""at":-9223372036854775808"#, "at must be"),
        (#""at":"-9223372036854775808""#, "at must be"),
        (#""at":true"#, "at must be"),
        (#""at":1.5"#, "at must be"),
        (#""at":"10000-01-01T00:00:00Z""#, "at must be"),
        (#""id":true"#, "id must be"),
        (#""id":{"a":1}"#, "id must be"),
    ])
    func outOfRangeTimesAndWrongTypesAreInvalid(field: String, mentions: String) throws {
        defer { directory.remove() }
        try initStore()
        let line = #"{"type":"delete-account","account":"alice","# + field + "}"
        let result = try LedgerBinary.run(["submit", "--store", store], stdin: line + "\n")
        let answer = Fixtures.object(result.lines.first ?? "")
        #expect(answer["decision"] as? String == "invalid")
        #expect((answer["message"] as? String)?.contains(mentions) == true, "\(answer)")
        #expect(try records() == 0)
    }

    @Test(arguments: ["expiresDate", "purchaseDate", "signedDate", "revocationDate"])
    func decodedDatesOutsideTheSupportedRangeAreInvalid(field: String) throws {
        defer { directory.remove() }
        try initStore()
        var transaction = Fixtures.transaction("1", at: t)
        transaction[field] = Int64(-9_223_372_036_854_775_807)
        let lines = [
            Fixtures.line(["type": "delete-account", "account": "nobody", "at": t]),
            Fixtures.line(["type": "purchase", "account": "alice", "transaction": transaction, "at": t]),
        ]
        let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: lines.joined(separator: "\n") + "\n")
        #expect(result.status == 0, "\(result.stderr)")
        let answers = result.lines.map(Fixtures.object)
        #expect(answers.map { $0["decision"] as? String } == ["ignored", "invalid"])
        #expect((answers.last?["message"] as? String)?.contains("transaction.\(field)") == true, "\(answers)")
        #expect(try records() == 0)
        #expect(try LedgerBinary.run(["log", "--store", store]).status == 0)
    }

    /// A UID with a control character (which no Firebase UID has, and no `ledger account --uid`
    /// could name) is refused naming the field, and appends nothing.
    @Test func anAccountWithAControlCharacterIsRefused() throws {
        defer { directory.remove() }
        try initStore()
        for uid in ["uid-\u{0}a", "uid\u{1F}", "tab\there", "del\u{7F}"] {
            let line = Fixtures.line(["type": "purchase", "account": uid, "transaction": Fixtures.transaction("4242", at: t), "at": t])
            let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: line + "\n")
            let answer = Fixtures.object(result.lines.first ?? "")
            #expect(answer["code"] as? String == "invalid-argument", "\(uid.debugDescription): \(answer)")
            #expect((answer["message"] as? String)?.contains("control character") == true, "\(answer)")
        }
        #expect(try records() == 0)
    }

    @Test func formattingAnyTimestampNeverTraps() {
        for time in [Int64.min, Int64.min + 1, -1, 0, Int64.max, 253_402_300_799_999] {
            #expect(!LedgerTime.format(time).isEmpty)
        }
        #expect(LedgerTime.format(Int64.min) == "\(Int64.min)ms")
    }
}

extension HostileInputTests {
    @Test func crlfLineEndingsAndCRLFBlankLinesKeepAnswersInStep() throws {
        defer { directory.remove() }
        try initStore()
        let input = "{\"id\":1,\"type\":\"delete-account\",\"account\":\"x\"}\r\n\r\n{\"id\":2,\"type\":\"delete-account\",\"account\":\"y\"}\r\n"
        let result = try LedgerBinary.run(["submit", "--store", store], stdin: input)
        let answers = result.lines.map(Fixtures.object)
        #expect(answers.count == 2)
        #expect(answers.map { $0["id"] as? Int } == [1, 2])
    }
}
