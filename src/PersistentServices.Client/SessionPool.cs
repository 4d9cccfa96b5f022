using System.Collections.Concurrent;

namespace PersistentServices.Client;

/// <summary>
/// The client's sessions per service (scheme, host and port): one request at a time per session, at most
/// <see cref="PersistentClientOptions.MaxSessionsPerService"/> in use at once. An idle session's next request acknowledges
/// its last reply to the service, so a session goes back to the pool only once that reply is stored.
/// </summary>
internal sealed class SessionPool(int maxPerService)
{
    private readonly ConcurrentDictionary<string, Service> _services = new(StringComparer.OrdinalIgnoreCase);

    /// <summary>
    /// A session of <paramref name="authority"/> for one request: an idle one, or one <paramref name="open"/> starts.
    /// Waits while all are in use. The caller gives it back with <see cref="Return"/> or <see cref="Drop"/>.
    /// </summary>
    public async Task<ClientSession> AcquireAsync(string authority, Func<CancellationToken, Task<ClientSession>> open, CancellationToken cancellationToken)
    {
        var service = _services.GetOrAdd(authority, _ => new Service(maxPerService));
        await service.Slots.WaitAsync(cancellationToken).ConfigureAwait(false);
        if (service.Idle.TryTake(out var idle))
        {
            return idle;
        }

        try
        {
            return await open(cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            service.Slots.Release();
            throw;
        }
    }

    /// <summary>The session's last reply is stored: it takes the next request.</summary>
    public void Return(ClientSession session)
    {
        var service = Get(session.Authority);
        service.Idle.Add(session);
        service.Slots.Release();
    }

    /// <summary>The session is given up, or stays with a request that awaits its reply: its slot is free.</summary>
    public void Drop(ClientSession session) => Get(session.Authority).Slots.Release();

    /// <summary>A session that held no slot (read back from the store, or freed by recovery) joins the idle ones, up to the limit.</summary>
    public void Adopt(ClientSession session)
    {
        var service = Get(session.Authority);
        if (service.Idle.Count < maxPerService)
        {
            service.Idle.Add(session);
        }
    }

    /// <summary>Takes every idle session out of the pool (the client stops: they are ended at their services).</summary>
    public List<ClientSession> TakeIdle()
    {
        var taken = new List<ClientSession>();
        foreach (var service in _services.Values)
        {
            while (service.Idle.TryTake(out var session))
            {
                taken.Add(session);
            }
        }

        return taken;
    }

    private Service Get(string authority) => _services.GetOrAdd(authority, _ => new Service(maxPerService));

    private sealed class Service(int max)
    {
        public SemaphoreSlim Slots { get; } = new(max, max);

        public ConcurrentBag<ClientSession> Idle { get; } = [];
    }
}
