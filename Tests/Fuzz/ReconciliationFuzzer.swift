// libFuzzer harness for reconciliation responses (Get All Subscription Statuses, Get Transaction History): the
// envelope, then each item's signed transaction and renewal info, verified under the Sandbox verifier and
// decoded under the Xcode one. Never a trap or a crypto-failure.
import AppleSignedData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReconciliation(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    guard let response = try? ReconciliationResponse(jsonData: bytes) else { return 0 }
    for verifier in [FuzzVerifiers.sandbox, FuzzVerifiers.xcode] {
        for result in verifier.verifyReconciliation(response, now: FuzzVerifiers.now) { FuzzVerifiers.check(result, "item") }
    }
    return 0
}
