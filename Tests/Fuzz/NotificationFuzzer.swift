// libFuzzer harness for a decoded App Store Server Notification V2 (`ledger submit --trust-decoded`), with its
// nested transaction and renewal info: any bytes decode or give a VerificationError, never a trap.
import AppleSignedData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNotification(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    FuzzVerifiers.check(Result { () throws(VerificationError) in try NotificationPayload(jsonData: bytes) }, "notification")
    return 0
}
