import Foundation
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The committed format-1 fixture (`Tests/Fixtures/format1`): what the upgrade and the old-bundle
/// checks start from.
@Suite struct FormatOneFixtureTests {
    let directory = TemporaryDirectory("ledger-fixture")

    /// Opening a format-1 store is refused with the upgrade command, and changes nothing.
    @Test func aFormatOneStoreIsRefusedNamingTheUpgradeCommand() throws {
        defer { directory.remove() }
        let store = directory.path("old")
        try FormatOneFixture.copyStore(to: store)
        let before = try Data(contentsOf: store.appendingPathComponent("data.mdb"))
        #expect(throws: LedgerStoreError.formatOne(directory: store.path)) { try Ledger(opening: store) }
        for command in [["verify"], ["binding", "--original-transaction-id", "2000000000000001"], ["submit", "--trust-decoded"]] {
            let result = try LedgerBinary.run(command + ["--store", store.path])
            #expect(result.status == 3, "\(command)")
            #expect(result.stderr.contains("ledger upgrade --from \(store.path) --to"), "\(result.stderr)")
        }
        #expect(try Data(contentsOf: store.appendingPathComponent("data.mdb")) == before)
    }

    /// A dispute bundle handed out over format-1 records keeps verifying offline, and shows the
    /// format-1 records grouped into the steps that made them.
    @Test func aFormatOneDisputeBundleStillVerifies() throws {
        let key = try Ed25519PublicKey(pem: String(decoding: try FormatOneFixture.file("signing.pub"), as: UTF8.self))
        let data = try FormatOneFixture.file("dispute-C.json")
        let bundle = try DisputeBundle.verify(data, publicKey: key)
        #expect(bundle.subject["originalTransactionId"] == FormatOneFixture.transferredLineage)
        #expect(bundle.records.isEmpty && !bundle.formatOneRecords.isEmpty)
        #expect(bundle.timeline.map(\.event).contains("transfer-applied"))
        #expect(bundle.timeline.first?.sequences.count ?? 0 > 1, "a format-1 step spans several records")
        #expect(bundle.timeline.last?.decision == .refreshed || bundle.timeline.last?.decision == .bound)
        var changed = data
        changed[data.count / 2] ^= 0x01
        #expect(throws: DisputeBundle.Failure.self) { try DisputeBundle.verify(changed, publicKey: key) }
        let result = try LedgerBinary.run([
            "dispute", "verify", FormatOneFixture.directory.appendingPathComponent("dispute-C.json").path, "--public-key",
            FormatOneFixture.directory.appendingPathComponent("signing.pub").path,
        ])
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.json["verified"] as? Bool == true)
        #expect(bundle.formatOneRecords.count == 18)
        #expect(result.json["records"] as? Int == bundle.formatOneRecords.count, "the format-1 records shown count: \(result.json)")
    }
}
