namespace PersistentServices.Client;

/// <summary>Keys of <see cref="HttpRequestMessage.Options"/> the exactly-once client reads.</summary>
public static class PersistentRequestOptions
{
    /// <summary>
    /// The application's name for a request (an order number, a command id): stored with it and given back with its
    /// reply by <see cref="PersistentSessionClient.RecoverAsync"/>, so the application knows which operation a recovered
    /// reply answers. At most 256 characters.
    /// </summary>
    public static readonly HttpRequestOptionsKey<string> OperationId = new("PersistentServices.OperationId");

    /// <summary>Internal: a resend of a stored request (its entry id) by <see cref="PersistentSessionClient.RecoverAsync"/>.</summary>
    internal static readonly HttpRequestOptionsKey<long> ResendEntry = new("PersistentServices.ResendEntry");

    /// <summary>Internal: the client's own control request (a session's end): not stored, numbered or retried by the session logic.</summary>
    internal static readonly HttpRequestOptionsKey<bool> Passthrough = new("PersistentServices.Passthrough");

    /// <summary>Internal: set by the retry strategy when a request was sent more than once.</summary>
    internal static readonly HttpRequestOptionsKey<bool> Retried = new("PersistentServices.Retried");
}
