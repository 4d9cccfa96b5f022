namespace PersistentServices.Sessions;

/// <summary>
/// Where the log holds a reply in full: the <c>ReplySent</c> record with its <c>full_reply</c> (<see cref="Lsn"/>) and the
/// first record it occupies (<see cref="FirstLsn"/>: its first body part when the body needed several records, else
/// <see cref="Lsn"/>), and about how many bytes of log it takes (<see cref="LogBytes"/>: what copying it forward costs).
/// While a session may still need the reply, the log is kept from <see cref="FirstLsn"/> on.
/// </summary>
internal readonly record struct ReplyLocation(long Lsn, long FirstLsn, long LogBytes = 0);
