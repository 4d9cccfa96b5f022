using Google.Protobuf;
using PersistentServices.Domain;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;

namespace PersistentServices.Sessions;

/// <summary>
/// One logged request as it runs, live or in replay: the records it writes go into its position in the session's
/// position stream; in replay they come back, in order, from <see cref="Cursor"/>.
/// </summary>
internal sealed class RequestExecution(DurableLog? log, string service, long epoch, Session session, LoggedPosition position, ReplayCursor? cursor)
{
    /// <summary>The log the request appends to; none in a replica's hot follower, whose replays append nothing (their records are all logged).</summary>
    public DurableLog Log => log ?? throw new InvalidOperationException("A hot follower's replay appends nothing: its request ran past its logged records.");

    public string Service { get; } = service;

    public long Epoch { get; } = epoch;

    public Session Session { get; } = session;

    public LoggedPosition Position { get; } = position;

    public ByteString SessionId => Session.IdBytes;

    /// <summary>Calls: the callees this request called (the multi-call optimization forces again before a second call to one).</summary>
    public HashSet<string> CalledInThisRequest { get; } = new(StringComparer.Ordinal);

    /// <summary>Calls: whether this request already forced the log before a call.</summary>
    public bool ForcedBeforeCall { get; set; }

    /// <summary>Replay only: the request's logged records still to be consumed.</summary>
    public ReplayCursor? Cursor { get; } = cursor;

    /// <summary>
    /// Why this request was abandoned while it ran (a call the host's stop ended, a member that refused it as an orphan, a
    /// write that would make a shared variable an orphan), or null. Once set, the request logs nothing more (every
    /// <see cref="Append"/> throws it again), and whatever the endpoint does with the exception (it may catch it and
    /// answer), the request ends abandoned, never with a logged reply: it is finished by a later run (a restart's replay
    /// or a rollback), which logs what this run could not.
    /// </summary>
    public Exception? Abandoned { get; private set; }

    /// <summary>Marks this request abandoned by <paramref name="reason"/> (the first reason wins) and returns it, to be thrown.</summary>
    public TException Abandon<TException>(TException reason)
        where TException : Exception
    {
        Abandoned ??= reason;
        return reason;
    }

    /// <summary>Appends a record written by this request and makes it part of the session's state (state number, DV).</summary>
    public long Append(RecordKind kind, IMessage body)
    {
        if (Abandoned is { } abandoned)
        {
            System.Runtime.ExceptionServices.ExceptionDispatchInfo.Throw(abandoned);
        }

        var lsn = Log.Append(kind, body);
        Position.Aux.Add(lsn);
        Session.NoteLogged(0, body.CalculateSize());
        Advance(lsn);
        return lsn;
    }

    /// <summary>
    /// The session's state number and own DV entry move to <paramref name="lsn"/> ([MSP §3.1]: a service depends on itself
    /// at its latest record); its own entries of earlier epochs are dropped (<see cref="DependencyVector.WithOwn"/>).
    /// </summary>
    public void Advance(long lsn, long? epoch = null)
    {
        Session.NoteLogged(lsn, 0);
        Session.Dv = Session.Dv.WithOwn(Service, new StateId(epoch ?? Epoch, lsn));
    }
}
