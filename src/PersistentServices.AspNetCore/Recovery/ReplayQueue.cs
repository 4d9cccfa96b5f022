using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// The recovered sessions waiting for their replay, in log order, except that a session whose client is waiting for it
/// goes first (<see cref="Prioritize"/>): recovery serves the clients that are there before the ones that are not.
/// </summary>
internal sealed class ReplayQueue
{
    private readonly Lock _gate = new();
    private readonly HashSet<Session> _members;
    private readonly Queue<Session> _waiting;
    private readonly Queue<Session> _urgent = new();
    private readonly HashSet<Session> _taken = [];

    public ReplayQueue(IEnumerable<Session> sessions)
    {
        _waiting = new Queue<Session>(sessions);
        _members = [.. _waiting];
    }

    public int Count
    {
        get
        {
            lock (_gate)
            {
                return _waiting.Count + _urgent.Count;
            }
        }
    }

    /// <summary>
    /// A client waits for <paramref name="session"/>: it is replayed next, unless its replay already started. Sessions
    /// this queue does not hold (those that hold reservations replay on a thread of their own) are left alone: a second
    /// replay of a session running beside its first would execute its requests twice.
    /// </summary>
    public void Prioritize(Session session)
    {
        lock (_gate)
        {
            if (_members.Contains(session) && !_taken.Contains(session))
            {
                _urgent.Enqueue(session);
            }
        }
    }

    public bool TryTake(out Session session)
    {
        lock (_gate)
        {
            while (_urgent.TryDequeue(out session!) || _waiting.TryDequeue(out session!))
            {
                if (_taken.Add(session))
                {
                    return true;
                }
            }

            return false;
        }
    }
}
