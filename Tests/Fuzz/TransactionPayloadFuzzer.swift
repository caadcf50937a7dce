// libFuzzer harness for the decoded JWSTransaction payload (`ledger submit --trust-decoded` reads it from the
// verifier, and a verified JWS carries it): any bytes decode or give a VerificationError, never a trap.
import AppleSignedData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTransactionPayload(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    FuzzVerifiers.check(Result { () throws(VerificationError) in try TransactionPayload(jsonData: bytes) }, "transaction")
    return 0
}
