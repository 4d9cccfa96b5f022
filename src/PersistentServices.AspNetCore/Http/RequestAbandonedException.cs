namespace PersistentServices.Http;

/// <summary>
/// Something other than the endpoint keeps a persistent request from completing safely: the host stopped while a call
/// waited, a member of the domain cannot be reached for a distributed flush, or the request turned out to depend on
/// state a crash took back. It is not the endpoint's failure (no 500 is logged): the request is abandoned, its client
/// gets 503 and retries, nothing was acknowledged.
/// </summary>
internal abstract class RequestAbandonedException(string message, Exception? inner = null) : Exception(message, inner);
