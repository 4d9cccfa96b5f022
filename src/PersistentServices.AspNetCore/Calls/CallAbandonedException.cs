namespace PersistentServices.Calls;

/// <summary>
/// A call to another service could not get a reply before the host stopped: the calling request is abandoned (its client
/// gets 503 and retries; nothing was acknowledged), and the next start makes the call again with the same id.
/// </summary>
internal sealed class CallAbandonedException(string message, Exception? inner = null) : Http.RequestAbandonedException(message, inner);
