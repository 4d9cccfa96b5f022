namespace PersistentServices.Client;

/// <summary>
/// The service no longer knows the session of a request that may already have run there (its session expired or ended
/// while the client retried): whether it ran cannot be learned from the service, and it is not sent again. The request
/// leaves the client's store. Raise the service's <c>SessionIdleRetention</c> above the longest time a client may be
/// away.
/// </summary>
public sealed class PersistentRequestOutcomeUnknownException : Exception
{
    /// <summary>Creates the exception.</summary>
    public PersistentRequestOutcomeUnknownException()
    {
    }

    /// <summary>Creates the exception with a message.</summary>
    public PersistentRequestOutcomeUnknownException(string message)
        : base(message)
    {
    }

    /// <summary>Creates the exception with a message and a cause.</summary>
    public PersistentRequestOutcomeUnknownException(string message, Exception innerException)
        : base(message, innerException)
    {
    }
}
