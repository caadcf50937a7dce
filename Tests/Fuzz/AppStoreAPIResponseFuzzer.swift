// libFuzzer harness for what the App Store Server API answers (`ledger apple …`): notification and
// transaction history pages, error bodies and the Retry-After header. Any bytes must parse or throw,
// never trap. A page that says hasMore carries the token or revision for the next one; a Retry-After
// that parses is a finite, non-negative number of seconds.
import AppStoreServerAPI
import AppleSignedData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAppStoreAPIResponse(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    if let page = try? NotificationHistoryResponse(jsonData: bytes) {
        expect(!page.hasMore || !(page.paginationToken ?? "").isEmpty, "hasMore without a pagination token")
    }
    if let history = try? ReconciliationResponse(jsonData: bytes), history.kind == .transactionHistory {
        expect(history.items.allSatisfy { $0.signedRenewalInfo == nil && $0.status == nil }, "a history item with envelope fields")
    }
    _ = APIErrorResponse(jsonData: bytes)
    if let seconds = RetryAfter.seconds(String(decoding: bytes.prefix(64), as: UTF8.self), now: 1_764_547_200_000) {
        expect(seconds.isFinite && seconds >= 0, "Retry-After gave \(seconds)")
    }
    return 0
}
