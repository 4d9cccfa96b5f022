using System.Collections.Concurrent;

namespace PersistentServices.Domain;

/// <summary>
/// The recovered state numbers a service knows (MSP §3.1, §4): for each service of its domain and each of its past
/// epochs, the LSN it recovered to. A DV that depends on a later LSN of such an epoch depends on lost state: an orphan.
/// Learned from the log at start, from the members' broadcasts, and by asking a member.
/// </summary>
internal sealed class RecoveredStates
{
    private readonly ConcurrentDictionary<(string Service, long Epoch), long> _known = new();

    public int Count => _known.Count;

    public IEnumerable<RecoveredStateNumber> All => _known.Select(k => new RecoveredStateNumber(k.Key.Service, new StateId(k.Key.Epoch, k.Value)));

    private readonly Lock _logging = new();

    /// <summary>Records <paramref name="recovered"/>; true when it was not known.</summary>
    public bool Learn(RecoveredStateNumber recovered)
        => _known.TryAdd((recovered.Service, recovered.State.Epoch), recovered.State.Lsn);

    /// <summary>
    /// Records <paramref name="recovered"/> and, when it was not known, logs it with <paramref name="append"/> (which returns
    /// the record's LSN) before any <see cref="Snapshot"/> can see it: a service checkpoint either lists the number or
    /// scans from below its record. Returns the record's LSN, or 0 when the number was known.
    /// </summary>
    public long LearnAndLog(RecoveredStateNumber recovered, Func<RecoveredStateNumber, long> append)
    {
        lock (_logging)
        {
            return Learn(recovered) ? append(recovered) : 0;
        }
    }

    /// <summary>
    /// Every number known now, and <paramref name="tail"/> read at the same moment: a number learned later is logged at or
    /// above that LSN (<see cref="LearnAndLog"/>), so a service checkpoint that lists these and scans from no higher than it
    /// forgets none of them when the log is truncated below its scan start ([MSP §3.4]).
    /// </summary>
    public (IReadOnlyList<RecoveredStateNumber> Known, long LoggedFrom) Snapshot(Func<long> tail)
    {
        lock (_logging)
        {
            return ([.. All], tail());
        }
    }

    public long? RecoveredLsn(string service, long epoch) => _known.TryGetValue((service, epoch), out var lsn) ? lsn : null;

    /// <summary>The first dependency of <paramref name="dv"/> on lost state, or null when it depends on none that is known lost.</summary>
    public RecoveredStateNumber? FindOrphan(DependencyVector dv)
    {
        foreach (var (service, state) in dv.Entries)
        {
            if (_known.TryGetValue((service, state.Epoch), out var recovered) && state.Lsn > recovered)
            {
                return new RecoveredStateNumber(service, new StateId(state.Epoch, recovered));
            }
        }

        return null;
    }
}
