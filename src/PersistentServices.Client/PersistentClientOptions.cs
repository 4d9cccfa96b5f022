namespace PersistentServices.Client;

/// <summary>
/// Options of one named client's exactly-once sessions (<c>AddPersistentSessions</c>, docs/client.md). Validated when
/// the application starts.
/// </summary>
public sealed class PersistentClientOptions
{
    /// <summary>
    /// The directory of this client's durable store (a log of its requests and replies). One directory per client process
    /// and named client: the log locks it, so a second process cannot open it. Required.
    /// </summary>
    public string StoreDirectory { get; set; } = "";

    /// <summary>The services' session resource (<c>PersistentServicesOptions.SessionsPath</c>). Default <c>/ps/sessions</c>.</summary>
    public string SessionsPath { get; set; } = "/ps/sessions";

    /// <summary>Most sessions per service (scheme, host and port), so most concurrent calls to it; more calls wait. Default 8.</summary>
    public int MaxSessionsPerService { get; set; } = 8;

    /// <summary>Largest request or reply body stored, in bytes (a larger request is refused before it is stored). Default 512 KiB.</summary>
    public int MaxBodyBytes { get; set; } = 512 << 10;

    /// <summary>Timeout of one attempt; the request is then sent again with the same ids. Default 30 seconds.</summary>
    public TimeSpan AttemptTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>First delay between attempts (exponential with jitter, or the service's <c>Retry-After</c>). Default 100 ms.</summary>
    public TimeSpan RetryDelay { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Longest delay between attempts. Default 5 seconds.</summary>
    public TimeSpan MaxRetryDelay { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Attempts after the first before the call fails; the request then stays pending in the store and
    /// <see cref="PersistentSessionClient.RecoverAsync"/> sends it again. Default 100 (about eight minutes with the default
    /// delays); <see cref="int.MaxValue"/> retries until the call is cancelled.
    /// </summary>
    public int MaxRetryAttempts { get; set; } = 100;

    /// <summary>
    /// When the client stops (its service provider is disposed), how long it may spend ending its idle sessions at their
    /// services (<c>DELETE /ps/sessions/{id}</c>), so they drop their last replies at once. Sessions with a request
    /// awaiting its reply are kept for <see cref="PersistentSessionClient.RecoverAsync"/>. Default 5 seconds;
    /// <see cref="TimeSpan.Zero"/>: sessions are left to expire at the services.
    /// </summary>
    public TimeSpan CloseSessionsTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// How many finished operation ids (<see cref="PersistentRequestOptions.OperationId"/> of requests whose reply was handed
    /// over or whose outcome was reported unknown) the store remembers, across restarts: a new request naming one of them
    /// throws <see cref="PersistentOperationRepeatedException"/> instead of running the operation again. It covers an
    /// application that, after a crash, sends again the operations it has no reply for: the one whose reply was handed over
    /// just before the crash is refused, not run twice. Keep it above the number of operations the application can have in
    /// flight. Default 1024, at most 1024; 0 remembers none.
    /// </summary>
    public int FinishedOperationRetention { get; set; } = 1024;

    /// <summary>
    /// The replication groups (docs/replication.md) this client calls: each a list of the base addresses (scheme, host and
    /// port, http or https, no path) of the nodes of one service, a primary and its replicas, at least two. A request to an
    /// address of a group goes to the node of that group that last served (at first, the request's own node); a node that
    /// refuses the connection (or drops it, or answers no reply within <see cref="AttemptTimeout"/>) or answers
    /// <c>503</c> problem <c>replica</c> is passed over for the next node of the group, once around, and then the request is
    /// retried as any other (<see cref="RetryDelay"/>, <c>Retry-After</c>), each retry going around again. The session and
    /// number stay those of the request, so it runs once whichever node serves it. A request never goes to an address
    /// outside its group. From configuration: <c>ReplicationGroups:0:0=http://orders-0:8080</c>,
    /// <c>ReplicationGroups:0:1=http://orders-1:8080</c>, ... Default: none.
    /// </summary>
    public IList<IList<Uri>> ReplicationGroups { get; } = new List<IList<Uri>>();

    internal IEnumerable<string> Validate()
    {
        if (string.IsNullOrWhiteSpace(StoreDirectory))
        {
            yield return "PersistentClientOptions.StoreDirectory is required: the directory of the client's durable store.";
        }

        if (string.IsNullOrEmpty(SessionsPath) || SessionsPath[0] != '/')
        {
            yield return $"PersistentClientOptions.SessionsPath must start with '/' (was '{SessionsPath}').";
        }

        if (MaxSessionsPerService is < 1 or > 1024)
        {
            yield return $"PersistentClientOptions.MaxSessionsPerService must be between 1 and 1024 (was {MaxSessionsPerService}).";
        }

        if (MaxBodyBytes is < 1024 or > ClientStore.MaxBodyLimit)
        {
            yield return $"PersistentClientOptions.MaxBodyBytes must be between 1024 and {ClientStore.MaxBodyLimit} (was {MaxBodyBytes}).";
        }

        if (AttemptTimeout < TimeSpan.FromMilliseconds(10))
        {
            yield return $"PersistentClientOptions.AttemptTimeout must be at least 10 ms (was {AttemptTimeout}).";
        }

        if (RetryDelay <= TimeSpan.Zero || MaxRetryDelay < RetryDelay)
        {
            yield return $"PersistentClientOptions.RetryDelay must be positive and at most MaxRetryDelay (were {RetryDelay} and {MaxRetryDelay}).";
        }

        if (CloseSessionsTimeout < TimeSpan.Zero || CloseSessionsTimeout > TimeSpan.FromMinutes(5))
        {
            yield return $"PersistentClientOptions.CloseSessionsTimeout must be between 0 and 5 minutes (was {CloseSessionsTimeout}).";
        }

        if (FinishedOperationRetention is < 0 or > ClientStore.MaxFinishedOperationRetention)
        {
            yield return $"PersistentClientOptions.FinishedOperationRetention must be between 0 and {ClientStore.MaxFinishedOperationRetention} (was {FinishedOperationRetention}).";
        }

        if (MaxRetryAttempts < 1)
        {
            yield return $"PersistentClientOptions.MaxRetryAttempts must be positive (was {MaxRetryAttempts}).";
        }

        foreach (var failure in Replication.ReplicationGroupRouter.Validate(ReplicationGroups, "PersistentClientOptions.ReplicationGroups"))
        {
            yield return failure;
        }
    }
}
