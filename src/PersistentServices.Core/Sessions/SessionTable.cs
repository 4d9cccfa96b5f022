using System.Collections.Concurrent;

namespace PersistentServices.Sessions;

/// <summary>The service's live sessions, by id.</summary>
internal sealed class SessionTable
{
    private readonly ConcurrentDictionary<SessionId, Session> _sessions = new();

    public int Count => _sessions.Count;

    public ICollection<Session> All => _sessions.Values;

    public bool TryGet(SessionId id, out Session session) => _sessions.TryGetValue(id, out session!);

    public bool TryAdd(Session session) => _sessions.TryAdd(session.Id, session);

    public bool Remove(SessionId id) => _sessions.TryRemove(id, out _);
}
