namespace PersistentServices.Sessions;

/// <summary>
/// The session rolled back (orphan recovery, [MSP §4.1]) while a request of it was admitted or executing: that execution
/// no longer applies, and its client (and any duplicate waiting for it) gets 503 and retries the same number.
/// </summary>
internal sealed class SessionRolledBackException(string message) : Exception(message);
