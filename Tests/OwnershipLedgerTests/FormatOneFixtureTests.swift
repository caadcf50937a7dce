import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The committed format-1 fixture (`Tests/Fixtures/format1`) is what the upgrade and the
/// old-bundle checks start from.
@Suite struct FormatOneFixtureTests {
    @Test func theFixtureIsAnIntactFormatOneLedgerWithItsBundleAndCheckpoint() throws {
        let directory = TemporaryDirectory("ledger-fixture")
        defer { directory.remove() }
        let store = directory.path("store")
        try FormatOneFixture.copyStore(to: store)
        let ledger = try Ledger(opening: store)
        let report = try ledger.store.replay()
        #expect(report.isIntact)
        #expect(report.verifiedRecords == FormatOneFixture.records)
        let key = try Ed25519PublicKey(pem: String(decoding: try FormatOneFixture.file("signing.pub"), as: UTF8.self))
        let checkpoint = try ledger.verifyCheckpoint(String(decoding: try FormatOneFixture.file("checkpoint.txt"), as: UTF8.self), publicKey: key)
        #expect(checkpoint.verified, "\(checkpoint.problems)")
        let bundle = try DisputeBundle.verify(try FormatOneFixture.file("dispute-C.json"), publicKey: key)
        #expect(bundle.subject["originalTransactionId"] == FormatOneFixture.transferredLineage)
        #expect(bundle.timeline.contains { $0.event == "transfer-applied" })
    }
}
