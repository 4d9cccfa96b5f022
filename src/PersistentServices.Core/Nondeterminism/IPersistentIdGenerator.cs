namespace PersistentServices;

/// <summary>New ids for persistent endpoints: logged inside a persistent request and returned from the log on replay (PS0201).</summary>
public interface IPersistentIdGenerator
{
    /// <summary>A new id.</summary>
    Guid NewGuid();
}
