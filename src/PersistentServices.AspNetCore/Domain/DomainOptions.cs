namespace PersistentServices;

/// <summary>
/// The service domain this service belongs to ([MSP §3.1] "Locally Optimistic Logging"; docs/domains.md): services
/// that trust each other and log optimistically among themselves. Part of <see cref="PersistentServicesOptions"/>.
/// Leave <see cref="Members"/> empty for no domain (every call is logged pessimistically).
/// </summary>
public sealed class DomainOptions
{
    /// <summary>
    /// The domain's services by name (their <see cref="PersistentServicesOptions.ServiceName"/>) and base address, this
    /// service included. Messages between members carry dependency vectors and are not forced; a member's named
    /// <c>HttpClient</c> must be named like the member (<c>AddHttpClient("Store1", ...).AddPersistentCalls()</c>) or name it
    /// (<c>AddHttpClient("store", ...).AddPersistentCalls("Store1")</c>).
    /// Members authenticate each other with <see cref="PersistentCallOptions.PeerKey"/>.
    /// </summary>
    public IDictionary<string, Uri> Members { get; } = new Dictionary<string, Uri>(StringComparer.Ordinal);

    /// <summary>
    /// How long a distributed flush waits for a member before the reply that needs it gets 503, asking it again while it
    /// is out of reach or answers 503 (a restart, a recovery). Default 5 seconds; at least 100 ms.
    /// </summary>
    public TimeSpan FlushTimeout { get; set; } = TimeSpan.FromSeconds(5);
}
