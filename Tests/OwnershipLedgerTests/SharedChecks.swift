import LedgerCore
import OwnershipLedger
import Testing

/// Checks the suites of this target share.
extension Ledger {
    /// The whole log replayed: chain intact, no invariant violated, read models as the log says, the vault consistent.
    func expectIntact() throws {
        let report = try store.replay()
        #expect(report.chainFault == nil)
        #expect(report.violations == [])
        #expect(report.readModelDifferences == [])
        #expect(report.vaultDifferences == [])
    }

    /// The products `uid` is entitled to through lineage `originalTransactionId` at `at`, judged on the present state.
    func activeProducts(_ uid: String, through originalTransactionId: String, at: Int64) throws -> [String] {
        guard let account = try pseudonym(ofUID: uid) else { return [] }
        let lineage = try lineage(originalTransactionId: originalTransactionId)
        let state = try state(lineages: [lineage], accounts: [account], asOf: nil).lineage(lineage)
        guard let entitlement = state.activeEntitlement(at: at), entitlement.account == account else { return [] }
        return [entitlement.productId]
    }
}
